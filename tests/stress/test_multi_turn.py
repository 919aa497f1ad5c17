"""`kvplan stress` on conversations (scenarios/multi-turn.yaml, the bundled engine on CPU): every
later turn resends the conversation with the engine's real reply, so its prefix hits depend on
what the cache still holds. Measured hits, evictions and preemptions must equal the stress
prediction (the engine's scheduler on a simulated clock, stand-in replies) and `predict`'s own
block pool (kvplan.perf.reuse_blocks, a separate implementation of vLLM's rules), and the gate
must catch a prediction one block off."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvplan.cli import main
from kvplan.results.result import load_result
from kvplan.stress.scenario_loader import load_scenario

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("multi-turn")
    with pytest.raises(SystemExit) as info:
        main(["stress", "--scenario", "multi-turn", "--out", str(out), "--force", "--no-progress"])
    assert info.value.code == 0
    return out


def test_hits_evictions_and_preemptions_are_predicted_exactly(run_dir: Path) -> None:
    result = load_result(run_dir / "result.json")
    assert result.complete and result.metrics["completed"] == 48
    for key in ("prefix_hit_tokens", "prefix_cache_evicted_blocks", "num_preemptions", "num_steps", "peak_kv_bytes"):
        assert result.prediction[key] == result.metrics[key], key
    # the scenario is what it says: turns hit, other sessions evict, one request is preempted
    assert result.metrics["prefix_hit_tokens"] > 0 and result.metrics["prefix_cache_evicted_blocks"] > 0
    assert result.metrics["num_preemptions"] >= 1


def test_predicts_own_block_pool_agrees_with_the_measured_run(run_dir: Path) -> None:
    from kvplan.perf.schedule import Engine, drive
    from kvplan.perf.scheduler_config import SchedulerConfig

    scenario = load_scenario("multi-turn")
    engine = scenario.engine
    result = load_result(run_dir / "result.json")
    config = SchedulerConfig(num_gpu_blocks=result.metrics["num_gpu_blocks"], block_size=engine.block_size,
                             max_num_seqs=engine.max_num_seqs, max_num_batched_tokens=engine.max_num_batched_tokens)

    class Unit:
        def step_s(self, shape: object) -> float:
            return 1e-3

    requests = [r if r.follows_turn else replace(r, arrival_s=0.0) for r in scenario.requests()]
    sim = drive(Engine(requests, config, Unit(), max_concurrency=scenario.arrival.concurrency))
    # the engine counts each admission's hits once; vLLM's counters (predict's `reuse`) count every
    # lookup, a blocked queue head again each step, so the sum over admissions is compared
    assert sim.admitted_hit_tokens == result.metrics["prefix_hit_tokens"]
    assert sim.pool is not None and sim.pool.evicted_blocks == result.metrics["prefix_cache_evicted_blocks"]
    assert (sim.preemptions, sim.steps) == (result.metrics["num_preemptions"], result.metrics["num_steps"])


def test_the_gate_passes_the_run_and_fails_a_prediction_one_block_off(run_dir: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["gate", "--result", str(run_dir / "result.json"), "--baseline",
              str(ROOT / "kvplan/data/baselines/multi-turn.json")])
    assert info.value.code == 0, capsys.readouterr().out
    data = json.loads((run_dir / "result.json").read_text())
    data["prediction"]["prefix_hit_tokens"] += 16
    off = tmp_path / "off.json"
    off.write_text(json.dumps(data))
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["gate", "--result", str(off), "--baseline", str(ROOT / "kvplan/data/baselines/multi-turn.json")])
    out = capsys.readouterr().out
    assert info.value.code == 1 and "prefix_hit_tokens" in out


@pytest.mark.parametrize(("change", "needle"), [
    ({"num_requests": 40}, "num_requests 40 is not the sessions' 12 x 4 = 48 turns"),
    ({"workload": {"sessions": {"num_sessions": 2, "session_rate_per_s": 3.0}}}, "session_rate_per_s"),
    ({"workload": {"sessions": {"num_sessions": 2, "turns": 2, "think_time_s": -1.0}}}, "think_time_s"),
    ({"workload": {"sessions": {"num_sessions": 2, "turns": 2, "turn_tokens": 10**9}}}, "turn_tokens"),
])
def test_a_bad_session_scenario_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict,
                                            needle: str) -> None:
    import yaml

    data = yaml.safe_load((ROOT / "scenarios/multi-turn.yaml").read_text())
    for key, value in change.items():
        data[key] = value
    if "workload" in change:
        data["num_requests"] = 4
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SystemExit) as info:
        main(["stress", "--scenario", str(path), "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_a_cpu_tier_behind_the_pool_is_predicted_exactly(tmp_path_factory: pytest.TempPathFactory) -> None:
    """scenarios/multi-turn-offload.yaml: the same conversations with a 16 MiB CPU tier. The engine
    copies blocks to host memory and back (tests/engine/test_tier_copies.py checks the K/V survive);
    its GPU and CPU hits, evictions and preemption equal the prediction, and the tier serves some."""
    out = tmp_path_factory.mktemp("multi-turn-offload")
    with pytest.raises(SystemExit) as info:
        main(["stress", "--scenario", "multi-turn-offload", "--out", str(out), "--force", "--no-progress"])
    assert info.value.code == 0
    result = load_result(out / "result.json")
    for key in ("prefix_hit_tokens", "external_prefix_hit_tokens", "prefix_cache_evicted_blocks", "num_preemptions",
                "num_steps"):
        assert result.prediction[key] == result.metrics[key], key
    assert result.metrics["external_prefix_hit_tokens"] > 0
