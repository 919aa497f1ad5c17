"""`kvplan plan-sessions` (kvplan.perf.session_plan): the replica search and the answer's choice on
trials whose outcome is set by hand, then the command end to end on a small workload."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.perf import session_plan
from kvplan.perf.session_plan import Trial, _fewest_replicas


def fake_trial(meets_from: int, tried: list[int]):
    def trial(spec, args, requests, tier, replicas, router, slo, price, perf_model) -> Trial:
        tried.append(replicas)
        return Trial("g", 1, tier, replicas, 1.0, 1.0, 0.5, 0, 0.5, replicas >= meets_from, float(replicas))
    return trial


@pytest.mark.parametrize(("meets_from", "order", "found"), [
    (5, [1, 2, 4, 8, 6, 5], 5),   # doubling to 8, then bisection down to 5
    (1, [1], 1),
    (9, [1, 2, 4, 8], None),      # max 8: none meets
    (3, [1, 2, 4, 3], 3),
])
def test_the_fewest_replicas_are_found_by_doubling_then_bisection(monkeypatch: pytest.MonkeyPatch, meets_from: int,
                                                                 order: list[int], found: int | None) -> None:
    tried: list[int] = []
    monkeypatch.setattr(session_plan, "_trial", fake_trial(meets_from, tried))
    trials = _fewest_replicas(None, None, [], 0.0, "prefix", None, None, "roofline", 8)  # type: ignore[arg-type]
    assert tried == order
    meeting = [t.replicas for t in trials if t.meets]
    assert (min(meeting) if meeting else None) == found


def test_plan_sessions_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A light workload one H100 serves: the answer is 1 replica without a tier (the smaller tier wins a
    tie in price), the curve has one point per tier size, and the plot is a PNG."""
    from kvplan.cli import main

    plot = tmp_path / "curve.png"
    with pytest.raises(SystemExit) as info:
        main(["plan-sessions", "--model", "llama-3.1-8b-instruct", "--sessions", "20", "--turns", "2",
              "--shared-prefix-tokens", "512", "--session-rate", "2", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100",
              "--kv-offloading-size", "0,4", "--max-model-len", "8192", "--plot", str(plot), "--json"])
    out = capsys.readouterr().out
    assert info.value.code == 0
    answer = json.loads(out)
    assert (answer["best"]["replicas"], answer["best"]["tier_gib"], answer["best"]["gpu"]) == (1, 0.0, "h100-sxm-80gb")
    assert [c["tier_gib"] for c in answer["curve"]] == [0.0, 4.0]
    assert answer["vllm_serve"].startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 1")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("args", "needle"), [
    (["--kv-offloading-size", "a"], "--kv-offloading-size 'a'"),
    (["--kv-offloading-size", "-1"], "--kv-offloading-size '-1'"),
    (["--router", "random"], "--router 'random'"),
    (["--tp", "0"], "--tp '0'"),
    (["--max-replicas", "0"], "--max-replicas 0"),
])
def test_bad_plan_sessions_input_is_one_line(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    from kvplan.cli import main

    with pytest.raises(SystemExit) as info:
        main(["plan-sessions", "--model", "llama-3.1-8b-instruct", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50",
              *args])
    err = capsys.readouterr().err
    assert info.value.code == 2 and needle in err and err.count("\n") == 1, err
