"""Close the loop on a real GPU: the kvplan engine on random weights with a real model's
dimensions (nothing downloaded), a short mixed burst, and the planner's and `kvplan predict`'s
figures for the same GPU beside what was measured.

    .venv/bin/python benchmarks/gpu_check.py                 # CUDA: Llama-3.1-8B in bf16 (< 8 minutes)
    .venv/bin/python benchmarks/gpu_check.py --model tiny-llama --requests 16   # any machine

Checks: weights (torch allocated after load vs the planner's weights per GPU), KV pool blocks
(the engine's budget vs vLLM's plan for the same utilization), NVML used memory, TTFT and ITL of
the burst vs `kvplan predict`. On CPU the tiny model runs the same flow; the memory and timing
comparisons that only mean something on CUDA are listed as skipped. The engine is kvplan's own
(transformers forward + paged attention), not vLLM: its times show how far this engine is from
the vLLM the predictor models, not the predictor's error.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kvplan.engine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from kvplan.engine.model_runner import random_model  # noqa: E402
from kvplan.errors import KvplanError  # noqa: E402
from kvplan.perf.predict import predict  # noqa: E402
from kvplan.plan import overheads as oh  # noqa: E402
from kvplan.plan.budget import plan_capacity  # noqa: E402
from kvplan.plan.engine_args import EngineArgs
from kvplan.spec.gpu import load_gpu  # noqa: E402
from kvplan.spec.profiles import load_model, model_profile  # noqa: E402
from kvplan.workload.request import Request

CUDA_ONLY = ("weights: torch.cuda.memory_allocated vs planner", "KV pool: engine blocks vs vLLM plan",
             "NVML used memory vs planner total", "TTFT / ITL vs kvplan predict on this GPU")


def burst(n: int, vocab: int, seed: int, max_len: int) -> list[tuple[list[int], int]]:
    """A mixed burst: prompts 64..1024 tokens, outputs 16..128 (bounded by max_len)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        p = int(rng.integers(64, min(1024, max_len // 2) + 1))
        o = int(rng.integers(16, min(128, max_len // 4) + 1))
        out.append((rng.integers(3, vocab, p).tolist(), o))
    return out


def run_burst(engine: LLMEngine, work: list[tuple[list[int], int]]) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT s per request, every inter-token gap s) measured on the engine's own clock."""
    engine.generate([work[0][0][:16]], SamplingParams(max_tokens=2, ignore_eos=True, temperature=0.0))  # warm-up
    t0 = time.perf_counter()
    ids = [engine.add_request(p, SamplingParams(max_tokens=o, ignore_eos=True, temperature=0.0), arrival_time_s=t0)
           for p, o in work]
    ttft: dict[str, float] = {}
    gaps: list[float] = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                times = out.token_times_s
                ttft[out.request_id] = times[0] - t0
                gaps += list(np.diff(times))
    return np.array([ttft[i] for i in ids]), np.array(gaps)


def gpu_name() -> str | None:
    name = torch.cuda.get_device_name(0).lower()
    for key, catalog in (("h200", "h200-sxm-141gb"), ("h100", "h100-sxm-80gb"), ("a100", "a100-sxm4-80gb"),
                         ("l40s", "l40s"), ("l4", "l4"), ("b200", "b200-sxm-180gb")):
        if key in name:
            return catalog
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cuda = torch.cuda.is_available()
    ap.add_argument("--model", default="llama-3.1-8b-instruct" if cuda else "tiny-llama")
    ap.add_argument("--requests", type=int, default=64 if cuda else 12)
    ap.add_argument("--max-model-len", type=int, default=4096 if cuda else 1024)
    a = ap.parse_args()
    device = "cuda" if cuda else "cpu"
    dtype = torch.bfloat16 if cuda else torch.float32
    spec = load_model(a.model)
    t_start = time.perf_counter()
    with torch.device(device):
        model = random_model(model_profile(a.model)["config"], dtype, seed=0)
    weights_measured = (
        torch.cuda.memory_allocated() if cuda else sum(p.numel() * p.element_size() for p in model.parameters())
    )
    weights_planned = oh.weights_bytes_per_gpu(spec, dtype="bfloat16" if cuda else "float32")
    print(f"{a.model} on {device} ({torch.cuda.get_device_name(0) if cuda else 'CPU'}), random weights, "
          f"{time.perf_counter() - t_start:.1f} s to build")
    print(f"weights: measured {weights_measured / 2**30:.3f} GiB, planned {weights_planned / 2**30:.3f} GiB "
          f"({100 * (weights_measured / weights_planned - 1):+.2f}%)")
    config = EngineConfig(device=device, dtype="bfloat16" if cuda else "float32", max_model_len=a.max_model_len,
                          gpu_memory_utilization=0.9, **({} if cuda else {"kv_cache_memory_bytes": 64 * 2**20}))
    engine = LLMEngine(model, config, spec=spec)
    work = burst(a.requests, spec.vocab_size, 0, a.max_model_len)
    ttft, gaps = run_burst(engine, work)
    print(f"engine: {engine.num_gpu_blocks} KV blocks; burst of {len(work)}: mean TTFT {ttft.mean() * 1e3:.1f} ms, "
          f"P99 TTFT {np.percentile(ttft, 99) * 1e3:.1f} ms, mean ITL {gaps.mean() * 1e3:.2f} ms")
    if not cuda:
        print("needs CUDA (skipped here): " + "; ".join(CUDA_ONLY))
        return 0
    name = gpu_name()
    if name is None:
        print(f"GPU {torch.cuda.get_device_name(0)!r} is not in the catalog: planner and predict comparisons skipped")
        return 0
    args = EngineArgs(gpu=load_gpu(name), dtype="bfloat16", max_model_len=a.max_model_len, vllm_version="0.11.0")
    try:
        plan = plan_capacity(spec, args)
        print(f"KV pool: engine {engine.num_gpu_blocks} blocks, vLLM plan {plan.num_gpu_blocks} "
              f"({100 * (engine.num_gpu_blocks / max(plan.num_gpu_blocks, 1) - 1):+.1f}%); "
              f"planned activation peak {plan.activation_bytes / 2**30:.2f} GiB, "
              f"torch peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
        pred = predict(spec, args, [Request(0.0, len(p), o) for p, o in work]).figures
        print(
            f"kvplan predict (vLLM on {name}): mean TTFT {pred['mean_ttft_ms']:.1f} ms, P99 TTFT "
            f"{pred['p99_ttft_ms']:.1f} ms, "
            f"mean ITL {pred['mean_itl_ms']:.2f} ms (measured / predicted TTFT "
            f"{ttft.mean() * 1e3 / pred['mean_ttft_ms']:.2f}x, "
            f"ITL {gaps.mean() * 1e3 / pred['mean_itl_ms']:.2f}x)"
        )
    except KvplanError as exc:
        print(f"planner: {exc}")
    try:
        import pynvml

        pynvml.nvmlInit()
        info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
        print(f"NVML used {info.used / 2**30:.2f} GiB of {info.total / 2**30:.2f} GiB")
    except Exception as exc:  # NVML is optional: pynvml may be absent
        print(f"NVML unavailable ({type(exc).__name__})")
    print(f"total {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
