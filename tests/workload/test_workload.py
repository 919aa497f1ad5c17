"""The seeded request stream: determinism, class mix, lengths, shared prefixes, arrivals."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvplan.errors import KvplanError
from kvplan.stress.scenario_loader import load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 2048

BASE: dict[str, Any] = {
    "name": "w",
    "model": "tiny-llama",
    "engine": {"max_model_len": 1024},
    "workload": {
        "classes": [
            {
                "name": "a",
                "weight": 0.6,
                "prompt_tokens": {"dist": "uniform", "min": 20, "max": 200},
                "output_tokens": 16,
            },
            {
                "name": "b",
                "weight": 0.3,
                "prompt_tokens": {"dist": "normal", "mean": 400, "std": 50, "min": 300, "max": 500},
                "output_tokens": {"dist": "lognormal", "mean": 60, "std": 30, "min": 4, "max": 200},
                "shared_prefix": {"id": "sys", "tokens": 128},
            },
            {
                "name": "c",
                "weight": 0.1,
                "prompt_tokens": 600,
                "output_tokens": {"dist": "uniform", "min": 100, "max": 700},
                "shared_prefix": {"id": "sys", "tokens": 128},
            },
        ]
    },
    "arrival": {"type": "poisson", "rate_per_s": 10.0},
    "num_requests": 2000,
    "warmup_requests": 5,
    "seed": 123,
}


def _scenario(**changes: Any):
    data = copy.deepcopy(BASE)
    data.update(changes)
    return parse_scenario(data)


def test_same_seed_same_stream() -> None:
    a = _scenario().requests(VOCAB)
    b = _scenario().requests(VOCAB)
    assert a == b


def test_different_seed_different_stream() -> None:
    a = _scenario().requests(VOCAB)
    b = _scenario(seed=124).requests(VOCAB)
    assert [r.prompt_token_ids for r in a] != [r.prompt_token_ids for r in b]
    assert [r.arrival_s for r in a] != [r.arrival_s for r in b]


def test_arrival_process_does_not_change_contents() -> None:
    poisson = _scenario().requests(VOCAB)
    constant = _scenario(arrival={"type": "constant", "rate_per_s": 3.0}).requests(VOCAB)
    closed = _scenario(arrival={"type": "concurrency", "concurrency": 8}).requests(VOCAB)
    key = [(r.class_name, r.prompt_token_ids, r.output_tokens) for r in poisson]
    assert key == [(r.class_name, r.prompt_token_ids, r.output_tokens) for r in constant]
    assert key == [(r.class_name, r.prompt_token_ids, r.output_tokens) for r in closed]
    assert all(r.arrival_s is None for r in closed)


def test_class_mix_frequencies() -> None:
    reqs = _scenario().requests(VOCAB)
    names = [r.class_name for r in reqs]
    n = len(names)
    for name, p in (("a", 0.6), ("b", 0.3), ("c", 0.1)):
        observed = names.count(name) / n
        assert abs(observed - p) < 4 * np.sqrt(p * (1 - p) / n), (name, observed)


def test_lengths_within_bounds_and_model_len() -> None:
    s = _scenario()
    for r in s.requests(VOCAB):
        assert r.prompt_tokens + r.output_tokens <= s.max_model_len
        if r.class_name == "a":
            assert 20 <= r.prompt_tokens <= 200 and r.output_tokens == 16
        elif r.class_name == "b":
            assert 300 <= r.prompt_tokens <= 500 and 4 <= r.output_tokens <= 200
        else:  # fixed 600 prompt, but clipped to max_model_len - output
            assert r.prompt_tokens == min(600, s.max_model_len - r.output_tokens)


def test_token_ids_in_vocab_and_not_special() -> None:
    reqs = _scenario().requests(64)
    ids = np.concatenate([np.asarray(r.prompt_token_ids) for r in reqs])
    assert ids.min() >= 3 and ids.max() < 64
    assert set(np.unique(ids)) == set(range(3, 64))  # uniform over the ordinary ids


def test_shared_prefix_identity() -> None:
    reqs = [r for r in _scenario().requests(VOCAB) if r.shared_prefix_id == "sys"]
    assert {r.class_name for r in reqs} == {"b", "c"}  # two classes, one prefix
    prefixes = {r.prompt_token_ids[:128] for r in reqs}
    assert len(prefixes) == 1 and all(r.shared_prefix_tokens == 128 for r in reqs)
    suffixes = {r.prompt_token_ids[128:160] for r in reqs}
    assert len(suffixes) == len(reqs)  # the rest of each prompt is its own


def test_warmup_flags() -> None:
    reqs = _scenario().requests(VOCAB)
    assert [r.is_warmup for r in reqs[:6]] == [True] * 5 + [False]
    assert len({r.request_id for r in reqs}) == len(reqs)


def test_poisson_mean_rate() -> None:
    reqs = _scenario().requests(VOCAB)
    gaps = np.diff([r.arrival_s for r in reqs])
    n = gaps.size
    assert reqs[0].arrival_s == 0.0
    # exponential gaps: mean 1/rate with standard error (1/rate)/sqrt(n)
    assert abs(gaps.mean() - 0.1) < 4 * 0.1 / np.sqrt(n)
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.1  # CV of an exponential is 1


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_gamma_burstiness_cv(burstiness: float) -> None:
    s = _scenario(arrival={"type": "poisson", "rate_per_s": 5.0, "burstiness": burstiness}, num_requests=4000)
    gaps = np.diff([r.arrival_s for r in s.requests(VOCAB)])
    assert abs(gaps.mean() - 0.2) < 0.2 * 6 / np.sqrt(burstiness * gaps.size)  # the rate is kept
    assert abs(gaps.std() / gaps.mean() - 1 / np.sqrt(burstiness)) < 0.1 / np.sqrt(burstiness)  # CV = 1/sqrt(shape)


def test_constant_arrivals() -> None:
    reqs = _scenario(arrival={"type": "constant", "rate_per_s": 4.0}, num_requests=9).requests(VOCAB)
    assert np.allclose([r.arrival_s for r in reqs], np.arange(9) * 0.25)


def test_ramp_grows_the_rate() -> None:
    s = _scenario(arrival={"type": "constant", "rate_per_s": 10.0, "ramp_s": 20.0}, num_requests=400)
    t = np.array([r.arrival_s for r in s.requests(VOCAB)])
    # cumulative intensity 10 * t^2 / 40 during the ramp: 10 requests by t=6.32 s, 100 by t=20 s
    assert np.sum(t < 20.0) == pytest.approx(100, abs=1)
    assert np.sum(t < 10.0) == pytest.approx(25, abs=1)
    after = np.diff(t[t > 20.5])
    assert np.allclose(after, 0.1)  # full rate after the ramp


def test_duration_open_loop() -> None:
    s = _scenario(num_requests=None, duration_s=10.0, warmup_requests=0)
    reqs = s.requests(VOCAB)
    assert all(r.arrival_s < 10.0 for r in reqs)
    assert abs(len(reqs) - 100) < 4 * 10


def test_duration_closed_loop_needs_a_cap() -> None:
    s = _scenario(
        num_requests=None, duration_s=10.0, warmup_requests=0, arrival={"type": "concurrency", "concurrency": 4}
    )
    with pytest.raises(KvplanError, match="max_requests"):
        s.requests(VOCAB)
    assert len(s.requests(VOCAB, max_requests=50)) == 50
    stream = s.request_stream(VOCAB)
    assert [next(stream).index for _ in range(3)] == [0, 1, 2]


def test_mixed_scenario_matches_the_article() -> None:
    s = load_scenario(ROOT / "scenarios" / "mixed.yaml")
    reqs = s.requests()
    prompt = np.mean([r.prompt_tokens for r in reqs])
    output = np.mean([r.output_tokens for r in reqs])
    assert 450 <= prompt <= 550 and 135 <= output <= 165  # ~500 in, ~150 out (seed 4.4)
    total = sum(r.prompt_tokens + r.output_tokens for r in reqs)
    assert 150_000 <= total <= 250_000
    assert {r.class_name for r in reqs} == {"short", "medium", "long"}
