"""Chained block hashes against vLLM 0.19.1's v1/core/kv_cache_utils.py (`hash_block_tokens`,
`NONE_HASH`): a full block is named by its parent's hash and its token ids, so the same tokens
after different prefixes never match; only full blocks are hashed; a stream keeps the hashes of its
earlier turns."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvplan.kvpool.block_hash import TokenStream, chain_hash


def test_chained_hashes_differ_for_the_same_block_after_different_prefixes() -> None:
    assert chain_hash(None, [1, 2]) != chain_hash(chain_hash(None, [9, 9]), [1, 2])
    a, b = TokenStream(2, [9, 9, 1, 2]), TokenStream(2, [8, 8, 1, 2])
    assert a.block_hashes(2)[1] != b.block_hashes(2)[1]
    assert TokenStream(2, [9, 9, 1, 2, 3]).block_hashes(5) == a.block_hashes(2)  # only full blocks


def test_a_stream_extended_by_a_turn_keeps_its_earlier_hashes() -> None:
    s = TokenStream(2, [1, 2, 3])
    first = list(s.block_hashes(1))
    s.extend([4, 5, 6])
    assert s.block_hashes(3)[:1] == first
    assert s.block_hashes(3) == TokenStream(2, [1, 2, 3, 4, 5, 6]).block_hashes(3)
    s.truncate(3)
    s.extend([7])
    assert s.block_hashes(2) == TokenStream(2, [1, 2, 3, 7]).block_hashes(2)


def test_a_stream_gives_no_more_hashes_than_asked_for() -> None:
    """A preempted request's stream was hashed past its lookup's end: a lookup of all but its last
    token must not see the last block (else it would hit every token and compute none)."""
    s = TokenStream(2, [1, 2, 3, 4])
    assert len(s.block_hashes(2)) == 2
    assert s.block_hashes(1) == s.block_hashes(2)[:1] and len(s.block_hashes(1)) == 1


def test_the_first_block_hangs_off_vllm_s_root_and_stand_in_ids_are_negative() -> None:
    assert chain_hash(None, [1, 2]) == chain_hash(-1, [1, 2])  # the root is a value like any parent (NONE_HASH)
    s = TokenStream(2, [1, 2])
    s.extend([-5, -5])  # a reply's stand-in tokens live below 0
    assert len(s.block_hashes(2)) == 2 and s.ids[-1] == -5


def test_a_partial_block_is_never_hashed() -> None:
    s = TokenStream(16, range(20))
    assert len(s.hashes_to(5)) == 1 and len(s.hashes) == 1  # 20 tokens: one full block of 16


@given(st.lists(st.integers(0, 3), max_size=12), st.lists(st.integers(0, 3), max_size=12))
def test_a_stream_names_blocks_as_chain_hash_does(a: list[int], b: list[int]) -> None:
    """A stream hashes its ids' bytes (faster than a tuple); for token ids (never negative) two
    streams' blocks are equal exactly when `chain_hash` over the same tokens says they are."""

    def chained(ids: list[int]) -> list[int]:
        out: list[int] = []
        for i in range(len(ids) // 3):
            out.append(chain_hash(out[-1] if out else None, ids[3 * i:3 * i + 3]))
        return out

    sa, sb = TokenStream(3, a).block_hashes(4), TokenStream(3, b).block_hashes(4)
    ca, cb = chained(a), chained(b)
    assert len(sa) == len(ca) and len(sb) == len(cb)
    assert [x == y for x, y in zip(sa, sb)] == [x == y for x, y in zip(ca, cb)]


@given(st.lists(st.integers(-3, 3), max_size=12), st.lists(st.integers(-3, 3), max_size=12))
def test_a_stream_s_blocks_are_equal_exactly_when_their_prefixes_are(a: list[int], b: list[int]) -> None:
    """Stand-in reply tokens are negative (-1 for one request, -2 for the next: CPython hashes the
    int -1 as -2, so a tuple of ids would alias them). Block i of two streams is the same block
    exactly when the tokens up to its end are the same."""
    sa, sb = TokenStream(3, a).block_hashes(4), TokenStream(3, b).block_hashes(4)
    same_prefix = [a[:3 * (i + 1)] == b[:3 * (i + 1)] for i in range(min(len(sa), len(sb)))]
    assert [x == y for x, y in zip(sa, sb)] == same_prefix
    assert TokenStream(3, [-1, 0, -1]).block_hashes(1) != TokenStream(3, [-1, 0, -2]).block_hashes(1)
