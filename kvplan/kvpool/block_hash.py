"""Chained block hashes: a full block is named by (its parent's hash, its token ids), as vLLM's
`hash_block_tokens` (v1/core/kv_cache_utils.py) names it, so equal blocks after different
prefixes never match. Python's tuple hash stands in for vLLM's sha256: only equality matters."""
from __future__ import annotations

from array import array
from collections.abc import Iterable

ROOT_HASH = -1  # the parent of a stream's first block (vLLM: NONE_HASH)


def chain_hash(parent: int | None, token_ids: Iterable[int]) -> int:
    """The hash of a full block of token ids (never negative) after `parent` (None: the first
    block). Deterministic across processes. Not for negative stand-in ids: CPython hashes the int
    -1 as -2, so a tuple holding -1 names the same block as one holding -2 (`TokenStream` hashes
    the ids' bytes instead)."""
    return hash((ROOT_HASH if parent is None else parent, tuple(token_ids)))


class TokenStream:
    """A growing token sequence and the hashes of its full blocks, computed once each and only
    when asked for. A conversation is one stream: each turn's prompt extends the last turn's
    prompt and reply, so its blocks' hashes are the earlier turn's, not hashed again."""

    __slots__ = ("block_size", "ids", "hashes")

    def __init__(self, block_size: int, ids: Iterable[int] = ()) -> None:
        self.block_size = block_size
        self.ids = array("q", ids)  # signed 64-bit: stand-in reply tokens live below 0
        self.hashes: list[int] = []

    def __len__(self) -> int:
        return len(self.ids)

    def extend(self, ids: Iterable[int]) -> None:
        self.ids.extend(ids)

    def truncate(self, num_tokens: int) -> None:
        """Drop the tokens after the first `num_tokens` (and the hashes of blocks they were in)."""
        del self.ids[num_tokens:]
        del self.hashes[num_tokens // self.block_size:]

    def hashes_to(self, num_blocks: int) -> list[int]:
        """The stream's own list of block hashes, holding at least the first `num_blocks` (or every
        full block, if fewer) and maybe more: index it only below the bound you asked for."""
        hashes, bs, ids = self.hashes, self.block_size, self.ids
        first, num_blocks = len(hashes), min(num_blocks, len(ids) // bs)
        if first < num_blocks:
            # A block's ids as bytes name it as its tuple would (fixed-width ids), at a third of the cost.
            raw, width = ids[first * bs:num_blocks * bs].tobytes(), bs * ids.itemsize
            parent = hashes[-1] if hashes else ROOT_HASH
            append = hashes.append
            for start in range(0, len(raw), width):
                parent = hash((parent, raw[start:start + width]))
                append(parent)
        return hashes

    def block_hashes(self, num_blocks: int) -> list[int]:
        """The hashes of the first `num_blocks` full blocks (or of every full block, if fewer; the
        stream's own list when it holds exactly those: do not modify it)."""
        hashes = self.hashes_to(num_blocks)
        num_blocks = min(num_blocks, len(self.ids) // self.block_size)
        return hashes if len(hashes) == num_blocks else hashes[:num_blocks]
