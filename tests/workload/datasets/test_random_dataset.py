from __future__ import annotations

import math

import numpy as np
import pytest

from kvplan.errors import KvplanError
from kvplan.workload.datasets.random_dataset import RandomDataset


def test_random_lengths_within_range_ratio() -> None:
    reqs = RandomDataset(1000, 100, 0.25, 500, seed=1).requests()
    ins = np.array([r.prompt_tokens for r in reqs])
    outs = np.array([r.output_tokens for r in reqs])
    assert ins.min() >= 750 and ins.max() <= 1250 and outs.min() >= 75 and outs.max() <= 125
    assert len(set(ins.tolist())) > 1


def test_rate_inf_sends_all_at_once_and_finite_rate_spaces_them() -> None:
    assert all(r.arrival_s == 0.0 for r in RandomDataset(num_prompts=10).requests())
    reqs = RandomDataset(num_prompts=2001, request_rate=20.0, seed=2).requests()
    gaps = np.diff([r.arrival_s for r in reqs])
    assert (gaps >= 0).all() and 0.045 < gaps.mean() < 0.055  # 1/20 s, 2000 exponential gaps


@pytest.mark.parametrize("n, rate, burstiness", [(200, 8.0, 1.0), (37, 0.5, 0.2), (1000, 100.0, 5.0)])
def test_sends_end_at_exactly_n_over_rate_as_vllm_s_client(n: int, rate: float, burstiness: float) -> None:
    """vLLM 0.19.1 serve.py get_request: delays are the cumulative gaps (the first request waits
    its own), rescaled so the last equals num_prompts / request_rate: a 200-prompt run at 8 req/s
    sends its last request at 25 s, whatever the draws."""
    times = [r.arrival_s for r in RandomDataset(num_prompts=n, request_rate=rate, burstiness=burstiness,
                                                seed=3).requests()]
    assert times[-1] == pytest.approx(n / rate, rel=1e-12)
    assert times[0] > 0 and all(b >= a for a, b in zip(times, times[1:]))


def test_higher_rate_compresses_the_same_arrivals() -> None:
    slow = RandomDataset(num_prompts=50, request_rate=5.0, burstiness=0.5).requests()
    fast = RandomDataset(num_prompts=50, request_rate=10.0, burstiness=0.5).requests()
    assert [f.arrival_s * 2 for f in fast] == pytest.approx([s.arrival_s for s in slow])


@pytest.mark.parametrize("kwargs", [{"num_prompts": 0}, {"request_rate": 0.0}, {"random_range_ratio": 1.0},
                                    {"burstiness": -1.0}, {"max_concurrency": 0}])
def test_bad_workload_is_one_error(kwargs: dict) -> None:
    with pytest.raises(KvplanError):
        RandomDataset(**kwargs).requests()
    assert math.isinf(RandomDataset().request_rate)


def test_sglang_s_client_sends_the_first_at_once_and_does_not_rescale() -> None:
    """sglang bench_serving: send, then sleep an exponential gap; no rescaling to n / rate."""
    times = [r.arrival_s for r in RandomDataset(num_prompts=50, request_rate=4.0, seed=3, client="sglang").requests()]
    vllm = [r.arrival_s for r in RandomDataset(num_prompts=50, request_rate=4.0, seed=3).requests()]
    assert times[0] == 0.0 and times[-1] != pytest.approx(50 / 4.0) and vllm[-1] == pytest.approx(50 / 4.0)
