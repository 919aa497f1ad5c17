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
    assert answer["vllm_serve"].startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct --gpu-memory-utilization 0.90 "
                                           "--max-model-len 8192 --max-num-seqs 1024 --block-size 16")
    assert "--tensor-parallel-size 1" in answer["vllm_serve"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_serve_line_carries_the_planned_length(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --max-model-len the plan serves the model's own 131,072 tokens, and says so."""
    from kvplan.cli import main

    with pytest.raises(SystemExit) as info:
        main(["plan-sessions", "--model", "llama-3.1-8b-instruct", "--sessions", "10", "--turns", "2",
              "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100", "--kv-offloading-size", "0", "--json"])
    assert info.value.code == 0
    line = json.loads(capsys.readouterr().out)["vllm_serve"]
    assert " --max-model-len 131072 " in line and "None" not in line


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


@pytest.mark.parametrize(("replicas", "ttft_ms", "tpot_ms"), [
    (1, 50.0, 1e9), (1, 1e9, 12.0), (1, 1e9, 1e9), (2, 60.0, 1e9), (2, 1e9, 1e9), (3, 40.0, 20.0),
    (3, 600.0, 200.0), (3, 520.0, 1e9), (3, 1e9, 130.0),  # P99s near 530 ms / 136 ms: met, then just missed
])
def test_a_trial_stops_only_at_a_certain_miss(replicas: int, ttft_ms: float, tpot_ms: float) -> None:
    """Early stopping never changes the verdict: a trial that meets is simulated to its end with the
    very figures of an unstopped run; one that stops is one the whole run misses."""
    from kvplan.perf.predict import predict
    from kvplan.plan.engine_args import EngineArgs
    from kvplan.results.slo import Slo
    from kvplan.spec.gpu import load_gpu
    from kvplan.spec.profiles import load_model
    from kvplan.workload.sessions import Sessions

    spec = load_model("llama-3.1-8b-instruct")
    args = EngineArgs.from_flags(gpu=load_gpu("l4"), max_model_len=8192)
    reqs = Sessions(num_sessions=120, turns=3, shared_prefix_tokens=1024, first_turn_tokens=256, turn_tokens=128,
                    output_tokens=64, think_time_s=1.0, session_rate_per_s=6.0).requests(0, spec.vocab_size)
    router = "prefix" if replicas > 1 else None
    whole = predict(spec, args, reqs, replicas=replicas, router=router).figures
    slo = Slo(ttft_ms=ttft_ms, tpot_ms=tpot_ms, percentile=99.0)
    quick = predict(spec, args, reqs, replicas=replicas, router=router, stop_on_miss=slo).figures
    whole_meets = whole["p99_ttft_ms"] <= ttft_ms and whole["p99_tpot_ms"] <= tpot_ms
    if quick.get("missed_slo"):
        assert not whole_meets and quick == {"missed_slo": True}
    else:
        assert quick == whole


def test_a_stopped_trial_has_no_figures_and_the_curve_is_simulated_to_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a tier 2 replicas meet the limits, with 8 GiB 4 do (made up): the answer is 2
    replicas without a tier, and the curve's 8 GiB point at 2 replicas, stopped in the search, is
    simulated again to its end."""
    from kvplan.results.slo import Slo

    calls: list[tuple[int, float, bool]] = []

    def trial(spec, args, requests, tier, replicas, router, slo, price, perf_model, may_stop=True) -> Trial:
        calls.append((replicas, tier, may_stop))
        meets = replicas >= (2 if tier == 0 else 4)
        if not meets and may_stop:
            return Trial("g", 1, tier, replicas, None, None, None, None, None, False, None, stopped=True)
        return Trial("g", 1, tier, replicas, 1.0, 1.0, 0.5, 0, 0.5, meets, None)

    monkeypatch.setattr(session_plan, "_trial", trial)
    monkeypatch.setattr(session_plan, "fork_map", lambda fn, jobs, workers: [fn(j) for j in jobs])
    monkeypatch.setattr(session_plan, "plan_capacity", lambda spec, args: type("P", (), {
        "fits": True, "num_gpu_blocks": 10, "args": args, "max_model_len": 1024})())
    monkeypatch.setattr(session_plan, "planned_serve_line", lambda spec, args, plan: "vllm serve m")
    monkeypatch.setattr(session_plan, "replace", lambda obj, **kw: obj)
    gpu = type("G", (), {"name": "g"})()
    slo = Slo(ttft_ms=1.0, tpot_ms=1.0, percentile=99.0)
    answer = session_plan.plan_sessions(None, None, [], slo, [gpu], [1], [0.0, 8.0], "prefix", 4, {})  # type: ignore[arg-type]
    assert (answer["best"]["replicas"], answer["best"]["tier_gib"]) == (2, 0.0)
    assert [(t["tier_gib"], t["replicas"], t["stopped"]) for t in answer["trials"]] == [
        (0.0, 1, True), (0.0, 2, False), (8.0, 1, True), (8.0, 2, True), (8.0, 3, True), (8.0, 4, False)]
    assert all(may_stop for _, _, may_stop in calls[:-1]) and calls[-1] == (2, 8.0, False)
    assert [(c["tier_gib"], c["replicas"], c["stopped"], c["p99_ttft_ms"]) for c in answer["curve"]] == [
        (0.0, 2, False, 1.0), (8.0, 2, False, 1.0)]
