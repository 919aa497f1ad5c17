"""`kvplan predict` and `kvplan plan` end to end: keys, figures that must hold, one-line errors."""
from __future__ import annotations

import json

import pytest

from kvplan.cli import main
from kvplan.workload.datasets.random_dataset import RandomDataset

VLLM_KEYS = ("duration", "completed", "request_throughput", "output_throughput", "total_token_throughput",
             "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
             "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms")
MEMORY_KEYS = ("num_gpu_blocks", "max_concurrency", "peak_kv_bytes", "num_preemptions")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_predict_json_has_vllm_and_memory_keys(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(
        capsys,
        "predict",
        "--model",
        "llama-3.1-8b-instruct",
        "--gpu",
        "h100",
        "--random-input-len",
        "512",
        "--random-output-len",
        "64",
        "--num-prompts",
        "50",
        "--request-rate",
        "5",
        "--json",
    )
    assert rc == 0
    d = json.loads(out)
    assert set(VLLM_KEYS + MEMORY_KEYS) <= set(d)
    assert d["completed"] == 50 and d["total_output_tokens"] == 50 * 64
    assert d["output_throughput"] == pytest.approx(50 * 64 / d["duration"])
    assert d["median_ttft_ms"] <= d["p99_ttft_ms"] and d["peak_kv_bytes"] > 0
    assert d["duration"] > 49 / 5 * 0.5  # arrivals alone span about 10 s


def test_predict_table_is_laid_out_like_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "predict", "--model", "qwen3-8b", "--gpu", "a100-sxm4-80gb", "--num-prompts", "20",
                     "--max-concurrency", "4", "--random-input-len", "256", "--random-output-len", "32")
    assert rc == 0
    for label in ("Successful requests:", "Mean TTFT (ms):", "P99 ITL (ms):", "Time per Output Token", "Preemptions:"):
        assert label in out


@pytest.mark.parametrize(("args", "needle"), [
    (("--model", "llama-3.1-8b-instruct", "--gpu", "h900"), "h900"),
    (("--model", "llama-3.1-405b", "--gpu", "l4"), "does not start"),
    (("--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--request-rate", "fast"), "--request-rate"),
    (("--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--max-model-len", "1024", "--random-input-len", "2000"),
     "max_model_len"),
])
def test_predict_bad_input_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], needle: str
) -> None:
    rc, out, err = run(capsys, "predict", *args, "--num-prompts", "5")
    assert rc == 2 and out == ""
    assert err.startswith("kvplan: error:") and needle in err and len(err.strip().splitlines()) == 1


def test_plan_lists_h100_and_l40s_for_the_issue_workload(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's acceptance: Llama-3.1-8B, 20 req/s of 2000-in/200-out, P99 TTFT 2 s, P99 TPOT 50 ms."""
    rc, out, _ = run(
        capsys,
        "plan",
        "--model",
        "llama-3.1-8b-instruct",
        "--request-rate",
        "20",
        "--random-input-len",
        "2000",
        "--random-output-len",
        "200",
        "--slo-ttft-ms",
        "2000",
        "--slo-tpot-ms",
        "50",
        "--gpu",
        "h100,l40s",
        "--kv-cache-dtype",
        "auto",
        "--price",
        "h100=3",
        "--price",
        "l40s=1",
        "--json",
    )
    assert rc == 0
    answer = json.loads(out)
    gpus = {c["gpu"] for c in answer["configs"]}
    assert {"h100-sxm-80gb", "l40s"} <= gpus
    for c in answer["configs"]:
        # the line pins what was simulated: vLLM's default seats (engine/arg_utils.py `_set_default_args`:
        # 1,024 on a device of 70 GiB or more that is not an A100, else 256), the block size, TP
        seats = 1024 if c["gpu"] == "h100-sxm-80gb" else 256
        assert c["vllm_serve"].startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct --gpu-memory-utilization 0.90")
        assert f"--max-num-seqs {seats} --block-size 16" in c["vllm_serve"]
        assert f"--tensor-parallel-size {c['tp']}" in c["vllm_serve"]
        assert c["ttft_ms"] <= 2000 and c["tpot_ms"] <= 50  # predicted at 20 req/s spread over the replicas
        assert c["total_gpus"] == c["replicas"] * c["tp"] and c["goodput_req_per_s"] > 0
        assert c["usd_per_hour"] == pytest.approx(c["total_gpus"] * (3 if c["gpu"] == "h100-sxm-80gb" else 1))
    costs = [c["usd_per_hour"] for c in answer["configs"]]
    assert costs == sorted(costs)


def test_plan_searches_data_and_expert_parallel_servers_for_a_moe_model(capsys: pytest.CaptureFixture[str]) -> None:
    """A MoE model's candidates include DP x TP servers with expert parallelism (within one 8-GPU
    node), each simulated with its replicas in lockstep as `predict` runs them; a replica is one
    vllm serve, so its GPUs are tp x dp. A dense model gets none (the Llama test above)."""
    from kvplan.perf.capacity import candidates
    from kvplan.spec.gpu import load_gpu

    gpu = load_gpu("h100-sxm-80gb")
    widths = [(c.tp, c.dp) for c in candidates([gpu], ["auto"], [None], moe=True)]
    assert widths[:3] == [(1, 1), (2, 1), (1, 2)] and all(tp * dp <= 8 for tp, dp in widths)
    assert {(1, 8), (2, 4), (4, 2)} <= set(widths) and (2, 8) not in widths
    assert all(c.dp == 1 for c in candidates([gpu], ["auto"], [None]))
    rc, out, _ = run(capsys, "plan", "--model", "qwen3-30b-a3b", "--request-rate", "20", "--random-input-len", "1000",
                     "--random-output-len", "200", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "60", "--gpus", "h100",
                     "--kv-cache-dtypes", "auto", "--price", "h100=3", "--json")
    assert rc == 0
    configs = json.loads(out)["configs"]
    dp = [c for c in configs if c["dp"] > 1]
    assert dp and all(c["expert_parallel"] and "--enable-expert-parallel" in c["vllm_serve"]
                      and f"--data-parallel-size {c['dp']}" in c["vllm_serve"] for c in dp)
    for c in configs:
        assert c["total_gpus"] == c["replicas"] * c["tp"] * c["dp"] and c["usd_per_hour"] == pytest.approx(
            3 * c["total_gpus"]
        )
    rc, out, _ = run(capsys, "plan", "--model", "qwen3-30b-a3b", "--request-rate", "20", "--random-input-len", "1000",
                     "--random-output-len", "200", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "60", "--gpu", "h100",
                     "--kv-cache-dtype", "auto")
    assert rc == 0 and "--data-parallel-size 2 --enable-expert-parallel" in out  # the table's cell may wrap


def test_plan_that_cannot_be_met_says_which_slo_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(
        capsys,
        "plan",
        "--model",
        "llama-3.1-8b-instruct",
        "--request-rate",
        "2",
        "--random-input-len",
        "2000",
        "--random-output-len",
        "50",
        "--slo-ttft-ms",
        "1",
        "--slo-tpot-ms",
        "500",
        "--gpu",
        "l40s",
        "--kv-cache-dtype",
        "auto",
    )
    assert rc == 1
    assert "TTFT" in err and "over 1 ms" in err and "TPOT" not in err


@pytest.mark.parametrize("args", [("--slo-ttft-ms", "-5", "--slo-tpot-ms", "50"),
                                  ("--slo-ttft-ms", "100", "--slo-tpot-ms", "50", "--slo-percentile", "120"),
                                  ("--slo-ttft-ms", "100", "--slo-tpot-ms", "50", "--gpu", "h900")])
def test_plan_bad_input_is_exit_2(capsys: pytest.CaptureFixture[str], args: tuple[str, ...]) -> None:
    rc, _, err = run(capsys, "plan", "--model", "llama-3.1-8b-instruct", "--request-rate", "2", *args)
    assert rc == 2 and err.startswith("kvplan: error:") and len(err.strip().splitlines()) == 1


def test_plan_model_fitting_no_candidate_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "plan", "--model", "llama-3.1-405b", "--request-rate", "1", "--slo-ttft-ms", "1000",
                     "--slo-tpot-ms", "100", "--gpu", "l4")
    assert rc == 2 and "does not start on any candidate" in err


def test_predict_takes_a_kvplan_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    from kvplan.stress.scenario_loader import load_scenario

    expected = [r for r in load_scenario("short-chat").requests() if not r.is_warmup]
    rc, out, _ = run(capsys, "predict", "--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--scenario", "short-chat",
                     "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["completed"] == len(expected) and d["total_output_tokens"] == sum(r.output_tokens for r in expected)


def test_plan_spread_over_processes_gives_the_same_answer() -> None:
    """Candidates are simulated in forked workers when there are cores: the answer is the one a
    single process gives, row for row, and every row's replica count is the fewest that meets the
    SLO (one fewer misses it, checked here by a probe of its own, of that many replicas' share of
    the prompts)."""
    from kvplan.perf.capacity import _Runner, replica_prompts, search
    from kvplan.plan.engine_args import EngineArgs
    from kvplan.results.slo import Slo
    from kvplan.spec.gpu import load_gpu
    from kvplan.spec.profiles import load_model

    spec, slo = load_model("llama-3.1-8b-instruct"), Slo(ttft_ms=2000, tpot_ms=50)
    workload = RandomDataset(2000, 200, 0.0, 200, 20.0)
    kwargs = dict(kv_dtypes=["auto", "fp8"], quantizations=[None])
    one = search(spec, EngineArgs(vllm_version="0.11.0"), workload, slo, [load_gpu("l40s")], workers=1, **kwargs)
    two = search(spec, EngineArgs(vllm_version="0.11.0"), workload, slo, [load_gpu("l40s")], workers=2, **kwargs)
    assert one == two and one["configs"]
    for row in one["configs"]:
        assert row["replicas"] >= 1 and row["ttft_ms"] <= 2000 and row["tpot_ms"] <= 50
        if row["replicas"] > 1:
            args = EngineArgs(vllm_version="0.11.0", gpu=load_gpu(row["gpu"]), tensor_parallel_size=row["tp"],
                              kv_cache_dtype=row["kv_cache_dtype"], max_model_len=one["max_model_len"])
            runner = _Runner(spec, args, workload, None)
            fewer = runner.probe(
                20.0 / (row["replicas"] - 1), slo, num_prompts=replica_prompts(200, row["replicas"] - 1)
            )
            assert not fewer.meets(slo), (row, fewer)


def test_probes_stopped_at_a_certain_miss_change_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Search probes stop once their SLO percentile is sure to be missed. The answer is the one
    full simulations give, and the stop fires exactly when the full run's percentile misses."""
    import math

    from kvplan.perf import capacity
    from kvplan.perf.capacity import _Runner, search
    from kvplan.perf.slo_watch import SloWatch
    from kvplan.plan.engine_args import EngineArgs
    from kvplan.results.slo import Slo
    from kvplan.spec.gpu import load_gpu
    from kvplan.spec.profiles import load_model

    spec, slo = load_model("llama-3.1-8b-instruct"), Slo(ttft_ms=1500, tpot_ms=40)
    workload = RandomDataset(2000, 200, 0.0, 300, 12.0)
    kwargs = dict(kv_dtypes=["auto", "fp8"], quantizations=[None], workers=1)
    stopping = search(
        spec, EngineArgs(vllm_version="0.11.0"), workload, slo, [load_gpu("l40s"), load_gpu("a100")], **kwargs
    )
    monkeypatch.setattr(
        SloWatch, "of", classmethod(lambda cls, slo, latency, reqs: cls(slo, latency, 1 << 62, 1 << 62))
    )
    full = search(
        spec, EngineArgs(vllm_version="0.11.0"), workload, slo, [load_gpu("l40s"), load_gpu("a100")], **kwargs
    )
    assert stopping == full
    monkeypatch.undo()
    runner = _Runner(spec, EngineArgs(vllm_version="0.11.0", gpu=load_gpu("l40s"), max_model_len=4096), workload, None)
    stopped = 0
    for rate in (0.5, 1.0, 2.0, 3.0, 5.0, 8.0):
        whole, quick = runner.probe(rate, slo, 300), runner.probe(rate, slo, 300, may_stop=True)
        assert whole.meets(slo) == quick.meets(slo), rate
        assert quick == whole if whole.meets(slo) else quick is capacity.MISSED or quick == whole
        assert math.isfinite(whole.ttft_ms)
        stopped += quick is capacity.MISSED
    assert stopped >= 2  # the overloaded rates did stop early


def test_data_parallel_probes_stop_at_a_certain_miss_too() -> None:
    """A MoE server with DP ranks in lockstep shares one watch over every rank's requests: a probe
    stops only where the full run misses, and gives the full run's figures where it meets."""
    import math

    from kvplan.perf import capacity
    from kvplan.perf.capacity import _Runner
    from kvplan.plan.engine_args import EngineArgs
    from kvplan.results.slo import Slo
    from kvplan.spec.gpu import load_gpu
    from kvplan.spec.profiles import load_model

    # met at 30 req/s, missed from ~80
    slo, workload = Slo(ttft_ms=200, tpot_ms=22), RandomDataset(1000, 200, 0.0, 200, 12.0)
    args = EngineArgs(gpu=load_gpu("h100"), max_model_len=2048, data_parallel_size=2, enable_expert_parallel=True)
    runner = _Runner(load_model("qwen3-30b-a3b"), args, workload, None)
    stopped = 0
    for rate in (2.0, 30.0, 80.0, 200.0, math.inf):
        whole, quick = runner.probe(rate, slo, 200), runner.probe(rate, slo, 200, may_stop=True)
        assert whole.meets(slo) == quick.meets(slo), rate
        assert quick == whole if whole.meets(slo) else quick is capacity.MISSED or quick == whole
        assert math.isfinite(whole.ttft_ms)
        stopped += quick is capacity.MISSED
    assert stopped >= 1


def test_goodput_below_a_64th_of_saturation_is_searched_not_assumed() -> None:
    """When every bisection probe misses, 1/64 of the saturated rate was never shown to meet the SLO:
    it is probed, and the search goes on below it (down to the trickle that met it), so the goodput
    reported is a rate that met the SLO."""
    import math

    from kvplan.perf.capacity import Probe, goodput
    from kvplan.results.slo import Slo

    class Fake:
        def __init__(self, limit: float) -> None:
            self.limit, self.rates = limit, []
            self.workload = type("W", (), {"random_output_len": 100})()

        def probe(self, rate: float, slo: Slo, num_prompts: int = 150, *, may_stop: bool = False) -> Probe:
            self.rates.append(rate)
            if math.isinf(rate):
                return Probe(5000.0, 60.0, 6400.0)  # saturated: 64 req/s of 100 tokens
            return Probe(100.0, 10.0, 0.0) if rate <= self.limit else Probe(9000.0, 90.0, 0.0)

    slo = Slo(ttft_ms=2000, tpot_ms=50)
    for limit in (0.3, 20.0):  # far below hi / 64 = 1 req/s, and well inside the first bracket
        runner = Fake(limit)
        lo, hi, light = goodput(runner, slo)  # type: ignore[arg-type]
        assert lo <= limit < hi and light.meets(slo)
        assert hi / lo < 1.2 and any(r == lo for r in runner.rates)  # the reported rate was probed and met


def test_every_catalog_gpu_predicts_or_says_why(capsys) -> None:
    """T4 and V100 have no bf16: vLLM serves them in float16, timed at their fp16 TFLOPS; a GPU
    with no throughput in the catalog (A10G) says what is missing, in one line."""
    import json as _json

    from kvplan.cli import main
    from kvplan.spec.gpu import gpu_catalog

    for name, gpu in gpu_catalog().items():
        with pytest.raises(SystemExit) as info:
            main(["predict", "--model", "llama-3.2-1b", "--gpu", name, "--num-prompts", "8", "--max-model-len", "2048",
                  "--random-input-len", "256", "--random-output-len", "16", "--json"])
        out, err = capsys.readouterr()
        if gpu.cuda_total_bytes and (gpu.bf16_dense_tflops or gpu.fp16_dense_tflops):
            assert info.value.code == 0 and _json.loads(out)["completed"] == 8, (name, err)
        else:  # no throughput (A10G), or no CUDA memory (Apple M-series): one line naming what is missing
            assert info.value.code == 2 and len(err.strip().splitlines()) == 1, (name, err)
            assert ("TFLOPS" in err) if gpu.cuda_total_bytes else ("no known device memory" in err), (name, err)


def test_moe_data_parallel_prediction_says_what_it_leaves_out(capsys: pytest.CaptureFixture[str]) -> None:
    """Attention DP on a MoE model: the step omits vLLM's per-step DP sync, which measured runs show
    (AIConfigurator's silicon rows: decode 30-41% slower than modeled), so the output says so; a
    single replica, or independent dense replicas, carry no such note."""
    common = ("predict", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--num-prompts", "20",
              "--random-input-len", "256", "--random-output-len", "32", "--json")
    rc, out, _ = run(capsys, *common, "--data-parallel-size", "2", "--enable-expert-parallel")
    assert rc == 0
    note = json.loads(out)["step_cost_sources"]["data_parallel"]
    assert "2 replicas" in note and "optimistic" in note
    rc, out, _ = run(capsys, *common)
    assert rc == 0 and "data_parallel" not in json.loads(out)["step_cost_sources"]
    rc, out, _ = run(capsys, "predict", "--model", "qwen3-8b", "--gpu", "h100", "--num-prompts", "20",
                     "--data-parallel-size", "2", "--json")
    assert rc == 0 and "data_parallel" not in json.loads(out)["step_cost_sources"]


def test_plan_ranks_by_list_price_and_names_where_each_comes_from(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --price, GPUs an AWS EC2 instance carries are priced from the bundled list (an
    instance's on-demand price / its GPUs); a GPU without one ranks after them, unpriced."""
    from kvplan.spec.prices import list_prices

    rc, out, _ = run(
        capsys,
        "plan",
        "--model",
        "llama-3.1-8b-instruct",
        "--request-rate",
        "20",
        "--slo-ttft-ms",
        "1000",
        "--slo-tpot-ms",
        "50",
        "--gpu",
        "h100,l40s,b200",
        "--kv-cache-dtype",
        "auto",
        "--json",
    )
    assert rc == 0
    configs = json.loads(out)["configs"]
    listed = list_prices()
    priced = [c for c in configs if c["usd_per_hour"] is not None]
    assert {c["gpu"] for c in priced} == {"h100-sxm-80gb", "l40s"}
    for c in priced:
        assert c["usd_per_hour"] == pytest.approx(c["total_gpus"] * listed[c["gpu"]].usd_per_hour)
        assert c["usd_per_hour_source"].startswith("list: AWS EC2") and "Libcloud" in c["usd_per_hour_dataset"]
    costs = [c["usd_per_hour"] for c in priced]
    assert costs == sorted(costs) and configs[:len(priced)] == priced  # unpriced B200 last
    assert all(c["gpu"] == "b200-sxm-180gb" and c["usd_per_hour_source"] is None for c in configs[len(priced):])
    rc, out, _ = run(
        capsys,
        "plan",
        "--model",
        "llama-3.1-8b-instruct",
        "--request-rate",
        "20",
        "--slo-ttft-ms",
        "1000",
        "--slo-tpot-ms",
        "50",
        "--gpu",
        "h100,l40s,b200",
        "--kv-cache-dtype",
        "auto",
    )
    assert rc == 0 and "$/h b200-sxm-180gb: no list price" in out and "$/h l40s: $1.861 per GPU-hour" in out


@pytest.mark.parametrize("price", ["h100=-1", "h100=nan", "h100=1e308", "h100", "l4=1"])
def test_plan_bad_price_is_exit_2(capsys: pytest.CaptureFixture[str], price: str) -> None:
    rc, _, err = run(capsys, "plan", "--model", "llama-3.1-8b-instruct", "--request-rate", "2", "--slo-ttft-ms", "1000",
                     "--slo-tpot-ms", "50", "--gpu", "h100", "--price", price)
    assert rc == 2 and err.startswith("kvplan: error: --price") and len(err.strip().splitlines()) == 1


def test_predict_names_the_scheduling_of_the_vllm_version(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.14 made async scheduling the default (a request reaching a busy engine runs one step
    later): the prediction says which scheduling it simulated, and the held step shows in TTFT."""
    common = ("predict", "--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--num-prompts", "40",
              "--random-input-len", "512", "--random-output-len", "128", "--request-rate", "4")
    rc, out, _ = run(capsys, *common, "--json")
    new = json.loads(out)
    rc_old, out, _ = run(capsys, *common, "--vllm-version", "0.13.0", "--json")
    old = json.loads(out)
    assert rc == rc_old == 0
    assert new["scheduling"].startswith("async") and old["scheduling"].startswith("sync")
    rc, out, _ = run(capsys, *common)
    assert rc == 0 and "scheduling: async" in out
    # vLLM's flag overrides the version's default, either way
    rc, out, _ = run(capsys, *common, "--no-async-scheduling", "--json")
    off = json.loads(out)
    assert rc == 0 and off["scheduling"].startswith("sync") and off["mean_ttft_ms"] < new["mean_ttft_ms"]
    rc, out, _ = run(capsys, *common, "--vllm-version", "0.13.0", "--async-scheduling", "--json")
    assert rc == 0 and json.loads(out)["scheduling"].startswith("async")


def test_plan_passes_the_scheduling_flag_to_its_serve_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --no-async-scheduling` simulates every candidate that way and its `vllm serve` lines say so."""
    rc, out, _ = run(
        capsys,
        "plan",
        "--model",
        "llama-3.1-8b-instruct",
        "--request-rate",
        "5",
        "--random-input-len",
        "512",
        "--random-output-len",
        "64",
        "--slo-ttft-ms",
        "2000",
        "--slo-tpot-ms",
        "100",
        "--gpu",
        "h100",
        "--kv-cache-dtype",
        "auto",
        "--no-async-scheduling",
        "--json",
    )
    assert rc == 0
    configs = json.loads(out)["configs"]
    assert configs and all(c["vllm_serve"].endswith("--no-async-scheduling") for c in configs)


def test_plan_keeps_its_old_flag_names_as_hidden_aliases(capsys, monkeypatch):
    """`plan` spells --gpu, --kv-cache-dtype and --quantization as every other command does; the
    plural names it had still work and are not in --help."""
    from kvplan.cli import main

    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = capsys.readouterr().out
    assert "--gpu" in text and "--gpus" not in text and "--kv-cache-dtypes" not in text
