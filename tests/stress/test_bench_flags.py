"""`kvplan stress` with `vllm bench serve`'s load flags: the scenario they build, the scenario file
they change, the flag combinations vLLM's semantics refuse, and --max-concurrency with a rate."""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.cli import app
from kvplan.errors import KvplanError
from kvplan.perf.step_cost import StepCost, StepShape
from kvplan.stress.bench_flags import BenchFlags
from kvplan.stress.scenario_loader import parse_scenario
from kvplan.stress.simulate import simulate_engine
from kvplan.stress.stress_run import StressOptions, stress_scenario
from kvplan.workload.request import Request


def _scenario(**flags):
    return parse_scenario(BenchFlags(**{"model": "tiny-llama", **flags}).scenario(None), "flags")


def test_random_dataset_lengths_prefix_and_defaults() -> None:
    s = _scenario(
        random_input_len=100, random_output_len=20, random_range_ratio=0.5, random_prefix_len=16, num_prompts=50
    )
    (cls,) = s.workload.classes
    # vLLM: uniform in [floor(len (1 - r)), ceil(len (1 + r))], after the prefix (kvplan counts the prefix in the
    # prompt)
    assert (cls.prompt_tokens.min, cls.prompt_tokens.max) == (16 + 50, 16 + 150)
    assert (cls.output_tokens.min, cls.output_tokens.max) == (10, 30)
    assert cls.shared_prefix.tokens == 16 and s.num_requests == 50
    reqs = s.requests()
    assert len({r.prompt_token_ids[:16] for r in reqs}) == 1  # one shared prefix
    assert all(66 <= r.prompt_tokens <= 166 and 10 <= r.output_tokens <= 30 for r in reqs)
    d = _scenario()
    assert d.num_requests == 1000 and d.workload.classes[0].prompt_tokens.mean == 1024  # vLLM's defaults
    assert d.workload.classes[0].output_tokens.mean == 128


def test_request_rate_and_max_concurrency_as_vllm() -> None:
    burst = _scenario(num_prompts=40)  # rate inf: everything at once = a closed loop of num_prompts users
    assert burst.arrival.type == "concurrency" and burst.arrival.concurrency == 40
    capped = _scenario(num_prompts=40, max_concurrency=8)
    assert capped.arrival.type == "concurrency" and capped.arrival.concurrency == 8
    rate = _scenario(num_prompts=40, request_rate=4.0, burstiness=0.5, max_concurrency=8)
    assert (rate.arrival.type, rate.arrival.rate_per_s, rate.arrival.burstiness, rate.arrival.max_concurrency) == \
        ("poisson", 4.0, 0.5, 8)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"dataset_name": "sharegpt"}, "needs --dataset-path"),
        ({"dataset_name": "random", "dataset_path": "x"}, "--dataset-path applies to"),
        (
            {"dataset_name": "sharegpt", "dataset_path": "x", "random_input_len": 5},
            "--random-input-len apply to --dataset-name random",
        ),
        ({"dataset_name": "random-mm"},
         "choose one of random, sharegpt, custom, burstgpt, sonnet, hf, spec_bench, prefix_repetition"),
        ({"dataset_name": "sonnet"}, "--dataset-name sonnet needs --dataset-path"),
        ({"burstiness": 2.0}, "finite --request-rate"),
        ({"request_rate": -1.0}, "--request-rate must be a positive"),
        ({"request_rate": math.nan}, "--request-rate must be a positive"),
        ({"sharegpt_output_len": 5}, "--sharegpt-output-len applies to --dataset-name sharegpt"),
        ({"dataset_path": "x"}, "--dataset-path needs --dataset-name"),
    ],
)
def test_contradictory_flags_are_one_line(flags: dict, message: str) -> None:
    with pytest.raises(KvplanError, match=message):
        BenchFlags(**{"model": "tiny-llama", **flags}).scenario(None)


def test_flags_change_a_scenario_file() -> None:
    base = stress_scenario(StressOptions("ci-smoke"))
    s = stress_scenario(StressOptions("ci-smoke", bench=BenchFlags(num_prompts=12, request_rate=3.0, seed=5)))
    assert (s.num_requests, s.arrival.type, s.arrival.rate_per_s, s.seed) == (12, "poisson", 3.0, 5)
    assert s.workload == base.workload and s.engine == base.engine  # untouched where no flag says otherwise
    with pytest.raises(KvplanError, match="give --scenario"):
        stress_scenario(StressOptions(None))
    with pytest.raises(KvplanError, match="--tokenizer applies to a --target server or to a dataset"):
        stress_scenario(StressOptions("ci-smoke", tokenizer="x"))


class _Fixed(StepCost):
    def step_s(self, shape: StepShape) -> float:
        return 0.01


def test_max_concurrency_caps_an_open_loop_and_ttft_counts_from_sending() -> None:
    reqs = [Request.of_ids(tuple(range(3, 35)), 20, 0.0, request_id=f"r{i}") for i in range(12)]  # all due at 0
    common = dict(num_gpu_blocks=1000, bytes_per_block=1, block_size=16, max_model_len=512, max_num_seqs=64,
                  max_num_batched_tokens=4096, cost_model=_Fixed())
    free = simulate_engine(reqs, **common)
    capped = simulate_engine(reqs, **common, max_in_flight=4)
    assert free.max_running == 12 and capped.max_running == 4
    # three waves of four; each request's first token comes one prefill step after it was sent
    ttfts = sorted(r.first_token_s - r.arrival_s for r in capped.records)
    assert max(ttfts) == pytest.approx(0.01) and capped.duration_s > 2.5 * free.duration_s


def test_stress_from_flags_only_runs_and_writes_vllm_result(tmp_path: Path) -> None:
    rows = tmp_path / "lens.jsonl"
    rows.write_text("\n".join(json.dumps({"input_len": 24 + i, "output_len": 4}) for i in range(6)))
    out = tmp_path / "out"
    r = CliRunner().invoke(
        app,
        [
            "stress",
            "--model",
            "tiny-llama",
            "--dataset-name",
            "custom",
            "--dataset-path",
            str(rows),
            "--num-prompts",
            "6",
            "--max-concurrency",
            "2",
            "--save-result",
            "--out",
            str(out),
            "--no-progress",
        ],
    )
    assert r.exit_code == 0, r.output
    vllm = json.loads((out / "result.vllm.json").read_text())
    assert vllm["num_prompts"] == 6 and vllm["max_concurrency"] == 2
    order = list(range(6))
    random.seed(0)  # vLLM's CustomDataset: random.seed(--seed, default 0); random.shuffle(rows)
    random.shuffle(order)
    assert vllm["input_lens"] == [24 + i for i in order] and vllm["output_lens"] == [4] * 6
    result = json.loads((out / "result.json").read_text())
    assert result["scenario"]["workload"]["dataset"]["name"] == "custom"
    assert result["metrics"]["max_concurrent_requests"] <= 2
