"""The flags several commands share, typed once: the server's (as `vllm serve` names them) and the
workload's (as `vllm bench serve` names them). A command takes these types so one flag has one
name, one help text and one default everywhere; the values are checked where the settings record
is built (`EngineArgs.from_flags`, `Workload`, `StressOptions`), never here.
"""
from __future__ import annotations

from typing import Annotated

import typer

# --- the model and the GPU ---------------------------------------------------------------------
Model = Annotated[
    str, typer.Option("--model", "-m", help="Profile name or alias, a config.json, or a model directory.")
]
Gpu = Annotated[str | None, typer.Option(help="GPU from the catalog (see `kvplan gpus`).")]
GpuMemoryGib = Annotated[float | None, typer.Option(help="Total GPU memory as CUDA reports it, in GiB.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.", metavar="")]
Strict = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Refuse (exit 2) a model with config keys or a quantization kvplan does not model, instead of warning.",
        metavar="",
    ),
]

# --- the server (vllm serve) -------------------------------------------------------------------
Tp = Annotated[int, typer.Option("--tp", "--tensor-parallel-size", help="Tensor-parallel size.")]
Pp = Annotated[int, typer.Option("--pp", "--pipeline-parallel-size", help="Pipeline-parallel size.")]
Dp = Annotated[
    int,
    typer.Option(
        "--dp",
        "--data-parallel-size",
        help="Data-parallel engine replicas (each with its own KV pool; a MoE model's experts spread over DP x TP "
            "GPUs).",
    ),
]
Ep = Annotated[
    bool,
    typer.Option(
        "--enable-expert-parallel",
        help="Expert parallelism for MoE layers (vLLM --enable-expert-parallel).",
        metavar="",
    ),
]
Dtype = Annotated[str, typer.Option(help="Model dtype: auto (the checkpoint's), float16, bfloat16, float32.")]
Quantization = Annotated[str | None, typer.Option(
    help="Runtime weight quantization of an unquantized checkpoint (e.g. fp8).")]
KvDtype = Annotated[str, typer.Option(
    help="auto, float16, bfloat16, float32, fp8, fp8_e4m3, fp8_e5m2; int8, int4 (planned only: no vLLM flag).")]
BlockSize = Annotated[int, typer.Option(help="Tokens per KV block (vLLM default 16).")]
MaxModelLen = Annotated[int | None, typer.Option(
    help="vLLM --max-model-len (default: estimate --ctx; predict the model's maximum, as vLLM; plan the smallest "
         "power of two >= 2048 that holds the longest request).")]
MaxNumSeqs = Annotated[int | None, typer.Option(
    help="vLLM --max-num-seqs (default chosen by GPU memory and version, as vLLM).")]
MaxBatched = Annotated[int | None, typer.Option(
    help="vLLM --max-num-batched-tokens (default by GPU memory and version).")]
Util = Annotated[float | None, typer.Option(help="Fraction of GPU memory the engine may use (vLLM default 0.9).")]
KvCacheBytes = Annotated[int | None, typer.Option(
    help="KV cache bytes per GPU; bypasses --gpu-memory-utilization, as in vLLM.")]
Eager = Annotated[bool, typer.Option("--enforce-eager", help="No CUDA graphs (vLLM --enforce-eager).", metavar="")]
AsyncScheduling = Annotated[bool | None, typer.Option(
    "--async-scheduling/--no-async-scheduling",
    help="vLLM's async scheduling: the next step is scheduled while this one runs, so a new request waits one step "
         "more (default: as the vLLM version does, on from 0.14).")]
Version = Annotated[str | None, typer.Option(
    help="vLLM version whose defaults and behaviour to model (default: the newest modelled).")]
PrefixCaching = Annotated[bool, typer.Option(
    "--enable-prefix-caching/--no-enable-prefix-caching",
    help="vLLM's prefix cache (on by default): with --scenario, prompt blocks an earlier request had (shared prefixes, "
         "repeated prompts) are hits; random prompts share none.", metavar="")]

# --- the workload (vllm bench serve) -----------------------------------------------------------
InputLen = Annotated[int, typer.Option(help="Prompt tokens per request (vllm bench serve --random-input-len).")]
OutputLen = Annotated[int, typer.Option(help="Output tokens per request (--random-output-len; ignore_eos).")]
RangeRatio = Annotated[float, typer.Option(help="Lengths uniform in len x [1 - r, 1 + r] (--random-range-ratio).")]
NumPrompts = Annotated[int, typer.Option(help="Requests to simulate (--num-prompts).")]
Burstiness = Annotated[float, typer.Option(help="Gamma shape of arrival gaps; 1 is Poisson (--burstiness).")]
MaxConcurrency = Annotated[
    int | None, typer.Option(help="Client-side limit on requests in flight (--max-concurrency).")
]
Seed = Annotated[int, typer.Option(help="Seed of lengths and arrivals.")]

# --- the bundled engine ------------------------------------------------------------------------
THREADS_HELP = ("The engine's intra-op CPU threads (default: the cores this process may use, minus those other "
                "processes keep busy; OMP_NUM_THREADS when set).")
Threads = Annotated[int | None, typer.Option("--threads", help=THREADS_HELP)]
