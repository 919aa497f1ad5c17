"""kvplan predict vs NVIDIA AIConfigurator on AIConfigurator's own measured vLLM runs, side by side.

The rows: `systems/silicon_sample.csv` of aiconfigurator-core 0.12.0 (vLLM, aggregated serving, H100 /
H200 / B200 SXM), up to --per-model rows per model (seeded sample). Each is a closed loop of
`batch_size` concurrent users sending `isl`-token prompts for `osl` output tokens. Most rows come from
InferenceMAX-style runs (`vllm bench serve`-like client, --request-rate inf --max-concurrency N,
num_prompts 10 x N, lengths drawn uniformly from [0.8 x len, len], means over every request); that
client setup is our reading of those harnesses, not something the rows record. By default kvplan
replays exactly that (--start sync --per-user 10 --range-ratio 0.8): the first N requests arrive
together and the random lengths take the users out of step. --start stagger instead spreads the
users' starts evenly over one request's duration (a pure steady state, fixed lengths; the earlier default, with
--per-user 3).
The 212 rows of AIConfigurator's gap analyses may instead come from its own benchmark script (aiperf,
fixed lengths, 20 x N requests after 2 x N drained warmups, 100 shuffled prompts that repeat, so
vLLM's prefix cache can hit) against a server started with the flags its generator writes
(--max-num-seqs 512, --max-num-batched-tokens 512 + isl + 1500): --gap-rows aiperf replays them that way.
kvplan simulates vLLM's scheduler and times steps with --perf-model (roofline, kernels, or both); AIConfigurator's
`cli_estimate(mode="agg")` runs in the
Python given by --aic-python (a venv with `pip install aiconfigurator==0.12.0`). Prints median and
P90 |error| of mean TTFT and TPOT per tool, over the rows every tool predicts, per model and GPU.

    .venv/bin/pip install "kvplan[kernels]"        # the kernel tables
    python3 -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator==0.12.0
    .venv/bin/python benchmarks/aic_silicon.py --aic-python /tmp/aic/bin/python [--per-model 30]

Each row is asked as it was run: its GEMM/MoE quantization (`gemm_quant_mode`: fp8 on a bf16
checkpoint is vLLM's runtime --quantization fp8; nvfp4 on a checkpoint that is not already 4-bit is
NVIDIA's published ModelOpt NVFP4 checkpoint of the model where tests/data carries its config
(nvidia/MiniMax-M2.5-NVFP4, nvidia/Kimi-K2.5-NVFP4: attention kept in bf16, an FP8 KV cache, both as
the checkpoint declares), else one synthesized from the architecture (Llama-3.1-70B: every linear
layer but lm_head in NVFP4, a bf16 KV cache); int4_wo and gpt-oss's 4-bit are the
checkpoints' own), --data-parallel-size `attention_dp_size` and --enable-expert-parallel when
`moe_ep_size` > 1; the client's concurrency is `silicon_concurrency` from the row's source (=
batch_size x attention_dp_size). Errors are grouped by dense / MoE and by quantization too.
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "tests" / "data" / "aiconfigurator" / "model_configs"
MODELS = {
    "Qwen/Qwen3-32B": ("Qwen--Qwen3-32B", None),
    "Qwen/Qwen3-235B-A22B-FP8": ("Qwen--Qwen3-235B-A22B-FP8", None),
    "meta-llama/Llama-3.1-70B": ("meta-llama--Meta-Llama-3.1-70B", None),
    "openai/gpt-oss-120b": ("openai--gpt-oss-120b", None),
    "MiniMaxAI/MiniMax-M2.5": ("MiniMaxAI--MiniMax-M2.5", None),
    "moonshotai/Kimi-K2.5": ("moonshotai--Kimi-K2.5", None),
    "nvidia/Llama-3.1-8B-Instruct-FP8": ("meta-llama--Meta-Llama-3.1-8B", "fp8"),
}
# NVIDIA's ModelOpt NVFP4 checkpoints of these models, as AIConfigurator ships their configs
NVFP4_CHECKPOINTS = {
    "MiniMaxAI/MiniMax-M2.5": "nvidia--MiniMax-M2.5-NVFP4",
    "moonshotai/Kimi-K2.5": "nvidia--Kimi-K2.5-NVFP4",
}
OFFLINE_IDS = ("meta-llama/Llama-3.1-70B", "nvidia/Llama-3.1-8B-Instruct-FP8")  # AIConfigurator would download these
GPUS = {
    "h100_sxm": "h100-sxm-80gb",
    "h200_sxm": "h200-sxm-141gb",
    "b200_sxm": "b200-sxm-180gb",
    "b300_sxm": "b300-sxm-288gb",
}

AIC_WORKER = r"""
import csv, json, sys, logging, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
from aiconfigurator.cli.api import cli_estimate
rows, out = json.load(open(sys.argv[1])), {}
for r in rows:
    try:
        res = cli_estimate(r["model_path"], r["system"], mode="agg", backend_name="vllm", isl=r["isl"], osl=r["osl"],
                           batch_size=r["batch_size"], tp_size=r["tp"], pp_size=r["pp"], attention_dp_size=r["dp"],
                           moe_tp_size=r["moe_tp"], moe_ep_size=r["ep"], gemm_quant_mode=r["gemm"],
                           moe_quant_mode=r["moe"])
        out[r["id"]] = [res.ttft, res.tpot]
    except Exception as exc:  # a row AIConfigurator cannot estimate is recorded, not fatal
        out[r["id"]] = str(exc)[:200]
json.dump(out, open(sys.argv[2], "w"))
"""


def _int(v: str, default: int | None = None) -> int | None:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return default


def silicon_rows(path: Path, per_model: int, seed: int) -> list[dict]:
    import random

    with path.open() as f:
        rows = [r for r in csv.DictReader(f) if r["backend"] == "vllm" and r["mode"] == "agg" and r["system"] in GPUS]
    by_model: dict[str, list[dict]] = {}
    for r in rows:
        by_model.setdefault(r["model_path"], []).append(r)
    rng = random.Random(seed)
    return [r for m in sorted(by_model) for r in rng.sample(by_model[m], min(per_model, len(by_model[m])))]


NVFP4_CONFIG = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}


def parallel(r: dict) -> tuple[int, int, int]:
    """(tp, attention dp, moe ep) of a row; a row without attention_dp_size whose MoE spans more GPUs
    than its TP (tp 1, moe_tp 4) ran that many attention replicas."""
    tp, ep = _int(r["tp_size"], 1), _int(r["moe_ep_size"], 1)
    return tp, _int(r["attention_dp_size"], 0) or max(1, _int(r["moe_tp_size"], 1) * ep // tp), ep


def concurrency(r: dict) -> int:
    """The client's concurrency: `silicon_concurrency=N` in the row's source, else batch x attention DP."""
    import re

    m = re.search(r"silicon_concurrency=(\d+)", r.get("silicon_data_source") or "")
    return int(m.group(1)) if m else _int(r["batch_size"]) * parallel(r)[1]


def row_model(r: dict, cache: dict) -> tuple[object, str | None] | str:
    """(spec, --quantization) of the checkpoint the row ran, or why there is none."""
    from kvplan.spec.profiles import load_model

    name = MODELS.get(r["model_path"], (None, None))[0]
    if name is None:
        return "no config"
    mode = (r.get("gemm_quant_mode") or "").strip()
    spec = cache.get(name) or cache.setdefault(name, load_model(str(CONFIGS / f"{name}_config.json")))
    method = spec.quant.method
    if mode in ("", "nan", "bfloat16") or mode == "int4_wo" or (mode == "fp8" and method == "fp8"):
        return spec, None  # the checkpoint's own weights
    if mode == "fp8":
        return spec, "fp8"  # vLLM --quantization fp8 on the bf16 checkpoint
    if mode == "nvfp4" and method in ("mxfp4", "nvfp4"):
        return spec, None  # gpt-oss's own 4-bit experts (AIConfigurator's label for them)
    if mode == "nvfp4" and r["model_path"] in NVFP4_CHECKPOINTS:
        name = NVFP4_CHECKPOINTS[r["model_path"]]
        return cache.get(name) or cache.setdefault(name, load_model(str(CONFIGS / f"{name}_config.json"))), None
    if mode == "nvfp4":
        key = name + "+nvfp4"
        if key not in cache:
            config = json.loads((CONFIGS / f"{name}_config.json").read_text())
            config["quantization_config"] = NVFP4_CONFIG
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "config.json"
                path.write_text(json.dumps(config))
                cache[key] = load_model(str(path))
        return cache[key], None
    return f"quantization {mode} not mapped"


def row_requests(n: int, isl: int, osl: int, range_ratio: float, seed: int) -> list:
    """`n` requests of `isl`/`osl` tokens, or with --range-ratio r lengths drawn uniformly from
    [r x len, len] (vLLM <= 0.8's random dataset, which InferenceMAX's client still uses)."""
    import numpy as np

    from kvplan.workload.request import Request

    if not range_ratio:
        return [Request(0.0, isl, osl) for _ in range(n)]
    rng = np.random.default_rng(seed)
    ins = rng.integers(max(1, int(isl * range_ratio)), isl + 1, size=n)
    outs = rng.integers(max(1, int(osl * range_ratio)), osl + 1, size=n)
    return [Request(0.0, int(i), int(o)) for i, o in zip(ins, outs)]


@dataclass(frozen=True)
class Harness:
    """How a source's client drew its load (the rows do not record it; read from each harness's script)."""

    per_user: int  # profiled requests per concurrent user
    range_ratio: float  # lengths uniform in [ratio x len, len]; 0: fixed
    warmup_per_user: int = 0  # warmup requests per user, drained before profiling starts
    dataset_entries: int = 0  # distinct prompts the client cycles through (0: every prompt new)
    max_requests: int = 2000  # this benchmark's bound on a row's simulated requests
    aic_generator: bool = False  # the server ran the flags AIConfigurator's generator writes, not vLLM's defaults

    def engine_flags(self, isl: int, osl: int, batch: int) -> dict[str, int]:
        """The vLLM flags this harness's server ran with beyond the row's parallelism. AIConfigurator's
        generator (aiconfigurator/generator/rule_plugin/vllm.rule, its default rule; run through its
        rule engine for isl 4096, batch 8: max_batch_size 512, max_num_tokens 6108, max_seq_len 5724)
        writes --max-num-seqs max(512, 2 x batch), --max-num-batched-tokens that + isl + 1500 and
        --max-model-len isl + osl + 1500; vLLM's defaults otherwise (--max-model-len just fits)."""
        if not self.aic_generator:
            return {"max_model_len": isl + osl + 16}
        seqs = 512 if batch < 512 else 2 * batch
        return {"max_num_seqs": seqs, "max_num_batched_tokens": seqs + isl + 1500, "max_model_len": isl + osl + 1500}

    def requests(self, b: int, isl: int, osl: int, num_gpu_blocks: int, block_size: int) -> list:
        """The profiled requests. With a finite dataset, aiperf's default shuffle sampler sends every
        entry once before any repeats, so request k (warmup included) repeats a prompt iff k >=
        entries; vLLM's prefix cache then holds it (all its full blocks but the last token's) if
        its LRU pool keeps every entry beside the running batch, else a cyclic reuse misses."""
        from kvplan.workload.request import Request

        n = min(max(self.per_user * b, 12), self.max_requests)
        reqs = row_requests(n, isl, osl, self.range_ratio, 0)
        if not self.dataset_entries:
            return reqs
        held = num_gpu_blocks >= (self.dataset_entries + b) * -(-(isl + osl) // block_size)
        first = self.warmup_per_user * b
        hit = (isl - 1) // block_size * block_size if held else 0
        return [Request(r.arrival_s, r.prompt_tokens, r.output_tokens, hit if first + k >= self.dataset_entries else 0)
                for k, r in enumerate(reqs)]


HARNESSES = {
    # InferenceMAX: `vllm bench serve --max-concurrency N --request-rate inf --num-prompts 10N
    # --random-range-ratio 0.8` (its benchmark_lib.sh); every prompt new
    "inferencemax": Harness(10, 0.8),
    # AIConfigurator's own benchmark (aiconfigurator/generator/config/backend_templates/benchmark/
    # bench_run.sh.j2, used for its gap analyses): `aiperf profile --concurrency N --num-requests 20N
    # --warmup-request-count 2N --isl-stddev 0`, aiperf 0.3's default 100 dataset entries, shuffled
    "aiperf": Harness(20, 0.0, warmup_per_user=2, dataset_entries=100, max_requests=2560, aic_generator=True),
}


def harness(r: dict, gap_rows: str) -> Harness:
    """InferenceMAX's client for every row, or with --gap-rows aiperf, AIConfigurator's own for the
    rows of its gap analyses (whether those used bench_run.sh.j2 is our guess: its sflow.py variant
    gives aiperf as many dataset entries as requests, i.e. no reuse)."""
    return HARNESSES["aiperf" if gap_rows == "aiperf" and "gap-analysis" in (r.get("silicon_data_source") or "")
                     else "inferencemax"]


def kvplan_row(r: dict, perf_model: str, cache: dict, start: str = "stagger",
               client: Harness | None = None) -> tuple[float, float] | str:
    from kvplan.perf.predict import predict
    from kvplan.plan.engine_args import EngineArgs
    from kvplan.spec.gpu import load_gpu
    from kvplan.workload.request import Request

    got = row_model(r, cache)
    if isinstance(got, str):
        return got
    spec, quant = got
    b, isl, osl = concurrency(r), _int(r["isl"]), _int(r["osl"])
    _, dp, ep = parallel(r)
    flags = (client or HARNESSES["inferencemax"]).engine_flags(isl, osl, _int(r["batch_size"], b))
    try:
        args = EngineArgs.from_flags(
            gpu=load_gpu(GPUS[r["system"]]),
            tensor_parallel_size=_int(r["tp_size"], 1),
            data_parallel_size=dp,
            enable_expert_parallel=ep > 1,
            **flags,
            quantization=quant,
            vllm_version=version if (version := str(r.get("backend_version") or ""))[:1].isdigit() else None,
        )  # a nightly: kvplan's newest
    except Exception as exc:  # noqa: BLE001 - recorded as the row's outcome
        return str(exc)[:200]
    n = min(max(3 * b, 12), 600)
    try:
        if start == "sync":  # the client's --max-concurrency b with rate inf: the first b start together
            from kvplan.perf.predict import scheduler_config, server_plan

            config = scheduler_config(server_plan(spec, args))
            reqs = (client or HARNESSES["inferencemax"]).requests(b, isl, osl, config.num_gpu_blocks, config.block_size)
            f = predict(spec, args, reqs, max_concurrency=b, perf_model=perf_model).figures
            return f["mean_ttft_ms"], f["mean_tpot_ms"]
        # the measured runs are steady-state closed loops: each session sends its next request when the
        # last ends, and the sessions are out of step (not all prefilling at once). One pass gives a
        # request's duration; the second spreads the sessions' starts evenly over it.
        first = predict(
            spec, args, [Request(0.0, isl, osl) for _ in range(n)], max_concurrency=b, perf_model=perf_model
        )
        gap_s = first.figures["mean_e2el_ms"] / 1e3 / b
        f = predict(spec, args, [Request(i * gap_s, isl, osl) for i in range(n)], max_concurrency=b,
                    perf_model=perf_model).figures
    except Exception as exc:  # noqa: BLE001 - recorded as the row's outcome
        return str(exc)[:200]
    return f["mean_ttft_ms"], f["mean_tpot_ms"]


def aic_rows(rows: list[dict], python: str) -> dict[str, object]:
    payload = [{"id": r["id"], "model_path": r["model_path"], "system": r["system"], "isl": _int(r["isl"]),
                "osl": _int(r["osl"]), "batch_size": _int(r["batch_size"]), "tp": _int(r["tp_size"], 1),
                "pp": _int(r["pp_size"], 1), "dp": _int(r["attention_dp_size"], 1), "moe_tp": _int(r["moe_tp_size"]),
                "ep": _int(r["moe_ep_size"]), "gemm": r["gemm_quant_mode"] or None, "moe": r["moe_quant_mode"] or None}
               for r in rows]
    with tempfile.TemporaryDirectory() as tmp:
        # AIConfigurator resolves these ids on the Hugging Face hub (offline here): give it a local
        # directory holding the same config.json it ships (the FP8 8B: the 8B architecture; the
        # row's gemm_quant_mode says fp8)
        for p in payload:
            name = MODELS.get(p["model_path"], (None, None))[0]
            if p["model_path"] in OFFLINE_IDS and name:
                folder = Path(tmp) / name
                folder.mkdir(exist_ok=True)
                (folder / "config.json").write_text((CONFIGS / f"{name}_config.json").read_text())
                p["model_path"] = str(folder)
        src, dst, worker = Path(tmp) / "rows.json", Path(tmp) / "out.json", Path(tmp) / "worker.py"
        src.write_text(json.dumps(payload))
        worker.write_text(AIC_WORKER)
        subprocess.run(
            [python, str(worker), str(src), str(dst)], check=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
        )
        return json.loads(dst.read_text())


def _stats(errors: list[float]) -> str:
    """median |error| / P90 |error| (median signed error: + is slower than measured)."""
    if not errors:
        return "   -  /   -         "
    s = sorted(abs(e) for e in errors)
    return (
        f"{statistics.median(s):5.0%}/{s[min(len(s) - 1, int(0.9 * len(s)))]:5.0%} ({statistics.median(errors):+4.0%})"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--silicon", type=Path, default=None, help="silicon_sample.csv (default: aiconfigurator-core's)")
    ap.add_argument("--aic-python", default=None, help="a Python with aiconfigurator==0.12.0 (else kvplan only)")
    ap.add_argument("--per-model", type=int, default=30)
    ap.add_argument("--perf-model", default="both", choices=["roofline", "kernels", "both"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--aic-cache", type=Path, default=None, help="AIConfigurator's answers: read if present, else written"
    )
    ap.add_argument(
        "--start",
        default="sync",
        choices=["stagger", "sync"],
        help="stagger: sessions out of step (steady state); sync: all users start at once, as vllm bench serve "
        "--max-concurrency with rate inf does, the mean over every request",
    )
    ap.add_argument("--gap-rows", default="inferencemax", choices=list(HARNESSES),
                    help="with --start sync: the client the rows of AIConfigurator's gap analyses are replayed as")
    ap.add_argument("--rows-out", type=Path, default=None, help="write each row's predictions and measurements (CSV)")
    a = ap.parse_args()
    from kvplan.perf.kernel_tables import data_root

    root = data_root()
    path = a.silicon or (root.parent / "silicon_sample.csv" if root else None)
    if path is None or not path.is_file():
        sys.exit("no silicon_sample.csv: pip install 'kvplan[kernels]' or pass --silicon")
    rows = silicon_rows(path, a.per_model, a.seed)
    tools: dict[str, dict[str, object]] = {}
    cache: dict = {}
    for pm in (["roofline", "kernels"] if a.perf_model == "both" else [a.perf_model]):
        tools[f"kvplan-{pm}"] = {r["id"]: kvplan_row(r, pm, cache, a.start, harness(r, a.gap_rows))
                                 for r in rows}
    cached = json.loads(a.aic_cache.read_text()) if a.aic_cache and a.aic_cache.is_file() else {}
    missing = [r for r in rows if r["id"] not in cached or "Failed to download" in str(cached[r["id"]])]
    if missing and a.aic_python:  # AIConfigurator's answers for the rows its cache does not have yet
        cached.update(aic_rows(missing, a.aic_python))
        if a.aic_cache:
            a.aic_cache.write_text(json.dumps(cached))
    if cached:
        tools["aiconfigurator"] = {r["id"]: cached.get(r["id"], "not run") for r in rows}
    common = [r for r in rows if all(isinstance(t.get(r["id"]), (list, tuple)) for t in tools.values())]
    print(f"{len(rows)} silicon rows sampled; every tool predicts {len(common)}; skipped per tool: "
          + ", ".join(f"{n} {sum(not isinstance(v, (list, tuple)) for v in t.values())}" for n, t in tools.items()))
    if a.rows_out:
        with a.rows_out.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(
                [
                    "id",
                    "model",
                    "system",
                    "isl",
                    "osl",
                    "concurrency",
                    "quant",
                    "tp",
                    "dp",
                    "ep",
                    "source",
                    "measured_ttft_ms",
                    "measured_tpot_ms",
                ]
                + [f"{n}_{m}" for n in tools for m in ("ttft_ms", "tpot_ms")]
            )
            for r in common:
                w.writerow(
                    [
                        r["id"],
                        r["model_path"],
                        r["system"],
                        r["isl"],
                        r["osl"],
                        concurrency(r),
                        r["gemm_quant_mode"],
                        *parallel(r),
                        (r["silicon_data_source"] or "")[:40],
                        r["silicon_ttft_ms"],
                        r["silicon_tpot_ms"],
                    ]
                    + [v for t in tools.values() for v in t[r["id"]]]
                )  # type: ignore[union-attr]
    groups = {"all": common}
    for r in common:
        groups.setdefault(
            "MoE" if "Llama" not in r["model_path"] and "Qwen3-32B" not in r["model_path"] else "dense", []
        ).append(r)
    for r in common:
        groups.setdefault(f"quant {r['gemm_quant_mode'] or 'bf16'}", []).append(r)
    for r in common:
        groups.setdefault("EP/DP" if parallel(r)[1] > 1 or parallel(r)[2] > 1 else "pure TP", []).append(r)
    for key in ("model_path", "system"):
        for r in common:
            groups.setdefault(r[key], []).append(r)
    print(
        f"{'rows: median / P90 |error| (signed median)':44s} "
        + "  ".join(f"{n:>14s} TTFT              TPOT              " for n in tools)
    )
    for label, rs in groups.items():
        cells = []
        for t in tools.values():
            ttft = [t[r["id"]][0] / float(r["silicon_ttft_ms"]) - 1 for r in rs]  # type: ignore[index]
            tpot = [t[r["id"]][1] / float(r["silicon_tpot_ms"]) - 1 for r in rs]  # type: ignore[index]
            cells.append(f"{'':14s} {_stats(ttft)} {_stats(tpot)}")
        print(f"{label[:32]:32s} n={len(rs):3d} " + "  ".join(cells))
    # each kvplan model alone, on every row it predicts (AIConfigurator skips some models entirely)
    for name, t in tools.items():
        if name == "aiconfigurator":
            continue
        own = [r for r in rows if isinstance(t.get(r["id"]), (list, tuple))]
        print(f"\n{name} alone, every row it predicts (n={len(own)}): median / P90 |error| TTFT, TPOT")
        by_model: dict[str, list[dict]] = {"all": own}
        for r in own:
            by_model.setdefault(r["model_path"], []).append(r)
        for r in own:  # the runs' vLLM builds: the tables are one build's kernels (the newest collection)
            by_model.setdefault(f"vLLM {(r.get('backend_version') or 'not recorded')[:20]}", []).append(r)
        for label, rs in by_model.items():
            ttft = [t[r["id"]][0] / float(r["silicon_ttft_ms"]) - 1 for r in rs]  # type: ignore[index]
            tpot = [t[r["id"]][1] / float(r["silicon_tpot_ms"]) - 1 for r in rs]  # type: ignore[index]
            print(f"  {label[:32]:32s} n={len(rs):3d} {_stats(ttft)} {_stats(tpot)}")


if __name__ == "__main__":
    main()
