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
