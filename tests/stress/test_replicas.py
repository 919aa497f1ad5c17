"""`kvplan stress` on replicas of the bundled engine behind a router (scenarios/multi-turn-replicas.yaml:
two replicas, each with a 64-block pool and a CPU tier, conversations sharing a system prompt). The
engines really run; the prediction routes the same requests by the same rule on the engine's
scheduler with stand-in replies. GPU hits, CPU hits, computed prompt tokens, evictions and
preemptions must be equal, the gate must check them, and the figures must add up to the prompts the
records count."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvplan.cli import main
from kvplan.results.result import load_result

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "kvplan/data/baselines/multi-turn-replicas.json"  # a run of the scenario, as the other baselines
EXACT = ("prefix_hit_tokens", "external_prefix_hit_tokens", "computed_prompt_tokens", "prefix_cache_evicted_blocks",
         "num_preemptions", "num_steps", "peak_kv_bytes")


def _stress(out: Path, *args: str, scenario: str = "multi-turn-replicas") -> dict:
    with pytest.raises(SystemExit) as info:
        main(["stress", "--scenario", scenario, "--out", str(out), "--force", "--no-progress", *args])
    assert info.value.code == 0
    result = load_result(out / "result.json")
    assert result.complete and result.metrics["completed"] == 48
    return {"metrics": result.metrics, "prediction": result.prediction, "scenario": result.scenario}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("replicas")
    _stress(out)
    return out


def test_two_replicas_behind_the_kv_router_are_predicted_exactly(run_dir: Path) -> None:
    result = load_result(run_dir / "result.json")
    assert result.scenario["replicas"] == 2 and result.scenario["router"] == "prefix"
    for key in EXACT:
        assert result.prediction[key] == result.metrics[key], key
    m = result.metrics
    # the scenario is what it says: both tiers serve, the pools evict, a request is preempted
    assert m["prefix_hit_tokens"] > 0 and m["external_prefix_hit_tokens"] > 0
    assert m["prefix_cache_evicted_blocks"] > 0 and m["num_preemptions"] >= 1
    # each replica's pool is the scenario's 2 MiB; the run's pool is both of them
    assert m["num_gpu_blocks"] == 2 * 2**20 // 32768 and m["kv_pool_bytes"] == 2 * 2 * 2**20
    assert m["peak_kv_bytes"] <= m["kv_pool_bytes"]


def test_the_gate_passes_the_run_and_fails_a_cpu_tier_figure_one_block_off(
        run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["gate", "--result", str(run_dir / "result.json"), "--baseline", str(BASELINE)])
    assert info.value.code == 0, capsys.readouterr().out
    for key in ("external_prefix_hit_tokens", "computed_prompt_tokens"):
        data = json.loads((run_dir / "result.json").read_text())
        data["prediction"][key] += 16
        off = tmp_path / f"{key}.json"
        off.write_text(json.dumps(data))
        capsys.readouterr()
        with pytest.raises(SystemExit) as info:
            main(["gate", "--result", str(off), "--baseline", str(BASELINE)])
        assert info.value.code == 1 and key in capsys.readouterr().out


def test_a_replicas_scenario_against_a_server_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["stress", "--scenario", "multi-turn-replicas", "--target", "http://127.0.0.1:9", "--out",
              str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "routes its own" in err and err.count("\n") == 1, err


@pytest.mark.parametrize(("args", "needle"), [
    (["--router", "prefix"], "on one replica routes nothing"),
    (["--replicas", "2"], "needs a router"),
    (["--replicas", "2", "--router", "random"], "choose one of round-robin, least-loaded, session, prefix"),
    (["--replicas", "17", "--router", "session"], "replicas"),
    (["--replicas", "2", "--router", "session", "--target", "http://127.0.0.1:9"], "routes its own requests"),
])
def test_replicas_and_routers_that_cannot_run_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           args: list[str], needle: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["stress", "--scenario", "multi-turn", "--out", str(tmp_path / "out"), "--no-progress", *args])
    err = capsys.readouterr().err
    assert info.value.code == 2 and needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("tier", [True, False], ids=["cpu-tier", "gpu-only"])
@pytest.mark.parametrize("replicas", [2, 3, 4])
def test_every_router_on_two_to_four_replicas_is_predicted_exactly(tmp_path: Path, replicas: int,
                                                                   tier: bool) -> None:
    data = yaml.safe_load((ROOT / "scenarios/multi-turn-replicas.yaml").read_text())
    if not tier:
        del data["engine"]["kv_offloading_bytes"]
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    hits = {}
    for router in ("round-robin", "least-loaded", "session", "prefix"):
        run = _stress(tmp_path / router, "--replicas", str(replicas), "--router", router, scenario=str(path))
        m, p = run["metrics"], run["prediction"]
        for key in EXACT:
            assert p[key] == m[key], (router, key)
        if not tier:
            assert m["external_prefix_hit_tokens"] == 0
        if m["num_preemptions"] == 0:  # every prompt token was served by one tier or computed once
            served = m["prefix_hit_tokens"] + m["external_prefix_hit_tokens"] + m["computed_prompt_tokens"]
            assert served == m["total_input_tokens"], router
        hits[router] = m["prefix_hit_tokens"] + m["external_prefix_hit_tokens"]
    # session affinity keeps every later turn where its history is; round-robin moves it
    assert hits["session"] > hits["round-robin"]
