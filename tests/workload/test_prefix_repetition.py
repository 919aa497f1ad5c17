"""vLLM's prefix_repetition dataset (vllm/benchmarks/datasets.py PrefixRepetitionRandomDataset,
0.19.1): num_prefixes x (num_requests // num_prefixes) requests, each prefix's requests sharing its
tokens, shuffled unless told not to; figures derived by hand."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from kvplan.errors import KvplanError
from kvplan.workload.prefix_cache import with_cached_tokens
from kvplan.workload.prefix_repetition import PrefixRepetition


def _requests(repetition: PrefixRepetition, n: int, seed: int = 0) -> list:
    return list(repetition.requests(n, seed, 32000, 4096, np.random.default_rng(seed)))


def test_counts_lengths_and_shared_prefixes() -> None:
    reqs = _requests(PrefixRepetition(prefix_tokens=64, suffix_tokens=32, num_prefixes=10, output_tokens=7), 25)
    assert len(reqs) == 20  # 10 x (25 // 10): vLLM does not oversample this dataset
    assert Counter(r.shared_prefix_id for r in reqs) == {f"repeated-prefix-{p}": 2 for p in range(10)}
    assert all(r.prompt_tokens == 96 and r.output_tokens == 7 for r in reqs)
    by_prefix: dict[str, set] = {}
    for r in reqs:
        by_prefix.setdefault(r.shared_prefix_id, set()).add(r.token_ids[:64])
    assert all(len(heads) == 1 for heads in by_prefix.values())
    assert len({next(iter(h)) for h in by_prefix.values()}) == 10  # ten different prefixes
    assert len({r.token_ids[64:] for r in reqs}) == 20  # every suffix its own


def test_unshuffled_order_and_prefix_cache_hits() -> None:
    reqs = _requests(PrefixRepetition(prefix_tokens=64, suffix_tokens=32, num_prefixes=3, output_tokens=4,
                                      shuffle=False), 9)
    assert [r.shared_prefix_id[-1] for r in reqs] == list("000111222")
    # block 16: a prefix's later requests find its 64 tokens (4 full blocks) cached; the first none
    hits = [r.cached_tokens for r in with_cached_tokens(reqs, 16)]  # no arrival times: stream order
    assert hits == [0, 64, 64] * 3


def test_shuffled_is_a_permutation_of_the_same_requests() -> None:
    ordered = _requests(PrefixRepetition(num_prefixes=4, shuffle=False), 8)
    shuffled = _requests(PrefixRepetition(num_prefixes=4), 8)
    assert sorted(r.shared_prefix_id for r in shuffled) == sorted(r.shared_prefix_id for r in ordered)
    assert [r.shared_prefix_id for r in shuffled] != [r.shared_prefix_id for r in ordered]


@pytest.mark.parametrize("n, needle", [(3, "at least the number of prefixes"), (None, "needs num_requests")])
def test_refusals(n: int | None, needle: str) -> None:
    with pytest.raises(KvplanError, match=needle):
        _requests(PrefixRepetition(num_prefixes=4), n)  # type: ignore[arg-type]
