"""Incremental detokenization for streamed responses: text deltas that never split a character.

Decoding one token at a time is wrong twice over: a byte-level token may hold half of a UTF-8
character (decoded alone it is U+FFFD), and tokenizers that drop or add a leading space depend on
the token before. Like vLLM's detokenizer, each step decodes a short window of ids twice, the
part already sent (`prefix..read`) and the same plus the new ids (`prefix..end`), and sends the
difference; while that text ends in U+FFFD (an incomplete character), the new ids are held back
until a later token completes it. `finish` sends whatever is still held back. The window starts
with the last few prompt ids, so the first generated token gets its leading space right.

Joined, the deltas equal the decoding of all generated ids together (special tokens skipped).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

REPLACEMENT_CHAR = "\ufffd"
PROMPT_CONTEXT_TOKENS = 5  # as vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET


class IncrementalDetokenizer:
    """One request's text, fed the ids it gets each step (`decode(ids) -> str` from its tokenizer)."""

    def __init__(self, decode: Callable[[list[int]], str], prompt_token_ids: Sequence[int]) -> None:
        self._decode = decode
        self._ids: list[int] = [int(t) for t in prompt_token_ids[-PROMPT_CONTEXT_TOKENS:]]
        self._prefix = 0  # ids[prefix:read] were decoded and sent; ids[read:] are held back
        self._read = len(self._ids)

    def _delta(self, flush: bool) -> str:
        if self._read == len(self._ids):
            return ""
        sent_text = self._decode(self._ids[self._prefix:self._read])
        new_text = self._decode(self._ids[self._prefix:])
        if len(new_text) <= len(sent_text) or (new_text.endswith(REPLACEMENT_CHAR) and not flush):
            # nothing printable yet (a special token, or a character still incomplete)
            return new_text[len(sent_text):] if flush else ""
        self._prefix, self._read = self._read, len(self._ids)
        return new_text[len(sent_text):]

    def step(self, token_ids: Sequence[int]) -> str:
        """The text the new ids add ("" while held back)."""
        self._ids.extend(int(t) for t in token_ids)
        return self._delta(flush=False)

    def finish(self) -> str:
        """The held-back text at the end of the request (an incomplete last character included)."""
        return self._delta(flush=True)


class WordDetokenizer:
    """The word tokenizer's form: each id is the piece ` t<id>` (nothing to hold back)."""

    def __init__(self, piece: Callable[[int], str]) -> None:
        self._piece = piece

    def step(self, token_ids: Sequence[int]) -> str:
        return "".join(self._piece(int(t)) for t in token_ids)

    def finish(self) -> str:
        return ""
