"""The one request record: lengths only, or token ids that fix the prompt length."""
from __future__ import annotations

import pytest

from kvplan.workload.request import Request


def test_of_ids_takes_the_length_of_the_ids() -> None:
    r = Request.of_ids((5, 6, 7), 4, 1.5, request_id="req-000001")
    assert (r.prompt_tokens, r.output_tokens, r.arrival_s, r.token_ids) == (3, 4, 1.5, (5, 6, 7))


def test_lengths_only_has_no_token_ids_to_give() -> None:
    r = Request(0.0, 100, 10)
    assert r.cached_tokens == 0 and r.prompt_token_ids is None
    with pytest.raises(ValueError, match="lengths only"):
        r.token_ids  # noqa: B018


def test_token_ids_are_packed_four_bytes_each_and_read_back_exactly() -> None:
    """A million prompts of a few hundred tokens must fit in bounded memory: ids are kept as
    unsigned 32-bit values (4 bytes a token), and read back as the same tuple."""
    from kvplan.workload.request import Request

    ids = (3, 70_000, 2**32 - 1, 0, 151_935)
    r = Request.of_ids(ids, 4, None)
    assert r.prompt_token_ids == ids and r.token_ids == ids and r.prompt_tokens == 5
    assert r.packed_ids is not None and len(r.packed_ids) == 4 * len(ids)
    assert Request.of_ids(list(ids), 4, None) == r and hash(Request.of_ids(ids, 4, None)) == hash(r)
    with pytest.raises(ValueError, match="token id"):
        Request.of_ids((2**32,), 1, None)
