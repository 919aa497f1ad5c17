"""Published serving benchmarks (`gpu-bench-calibration.csv`) read as kvplan cases.

Rows are taken as they are: version strings like '0.5.4 (docker ...)', 'inf' rates, NaNs, and the
facts the notes add (gpu_memory_utilization, the start-up log's KV tokens, the run's real token
totals). Every assumption made for a row is recorded on the case; a row kvplan cannot represent
becomes a `Skipped` with the reason, never silently dropped.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError

# models served under a name kvplan has no profile for, mapped to one with the same architecture
SAME_ARCHITECTURE = {
    "qwen/qwen2-7b-instruct": ("qwen2.5-7b-instruct", "Qwen2-7B has Qwen2.5-7B's dimensions"),
    "qwen/qwen2-7b": ("qwen2.5-7b", "Qwen2-7B has Qwen2.5-7B's dimensions"),
    "qwen/qwen2-72b": ("qwen2.5-72b", "Qwen2-72B has Qwen2.5-72B's dimensions"),
    "qwen/qwen2-72b-instruct": ("qwen2.5-72b-instruct", "Qwen2-72B has Qwen2.5-72B's dimensions"),
    "meta-llama/meta-llama-3.1-8b-instruct": ("llama-3.1-8b-instruct", "old repo name of Llama-3.1-8B-Instruct"),
}
DEFAULT_VERSION_BY_SOURCE = {"dennislee22/vLLM-benchmarking": "0.10.1.1"}  # the same repo's logged runs
DEFAULT_MAX_MODEL_LEN_BY_SOURCE = {"dennislee22/vLLM-benchmarking": 16384}


@dataclass(frozen=True)
class Case:
    row: int  # 0-based data row of the CSV
    source: str  # owner/repo of the source URL (the leave-one-source-out unit)
    engine: str
    model: str  # kvplan profile name
    gpu: str  # catalog name
    tp: int
    vllm_version: str
    input_len: int
    output_len: int
    num_prompts: int
    request_rate: float
    max_concurrency: int | None
    max_model_len: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    gpu_memory_utilization: float
    quantization: str | None
    kv_cache_tokens: int | None  # the start-up log's pool, when the notes give it
    kv_cache_memory_bytes: int | None  # the KV GiB a README states when no start-up log gives tokens
    prefix_hit_rate: float  # the server's logged prefix-cache hit rate (identical prompts re-sent across runs)
    output_tok_s: float
    mean_tpot_ms: float | None
    mean_ttft_ms: float | None
    assumptions: tuple[str, ...] = field(default=())
    mean_e2e_ms: float | None = None


@dataclass(frozen=True)
class Skipped:
    row: int
    source: str
    reason: str


def _num(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def source_of(url: str) -> str:
    m = re.search(r"github\.com/([^/]+/[^/]+)", str(url))
    return m.group(1) if m else str(url)[:60]


def gpu_name(text: str) -> tuple[str | None, list[str]]:
    """Catalog name for a GPU as a row writes it; SXM and the largest memory when not stated."""
    t = str(text).lower()
    notes: list[str] = []
    pcie = "pcie" in t
    if "sxm" not in t and not pcie:
        if "a100" in t and "80" in t:
            # an A100 80GB row that names no form factor: PCIe cards are the common rental/pod part, and
            # TP=2 runs of such rows scale like a PCIe link, not NVLink
            pcie = True
            notes.append(f"GPU {text!r}: form factor not stated, PCIe assumed")
        else:
            notes.append(f"GPU {text!r}: SXM assumed")
    if "a100" in t:
        if "40gb" in t.replace(" ", ""):
            return ("a100-pcie-40gb" if pcie else "a100-sxm4-40gb"), notes
        if "80" not in t:
            notes.append(f"GPU {text!r}: 80 GB assumed")
        return ("a100-pcie-80gb" if pcie else "a100-sxm4-80gb"), notes
    if "h100" in t:
        return ("h100-pcie-80gb" if pcie else "h100-sxm-80gb"), notes
    if "h200" in t:
        return "h200-sxm-141gb", notes
    if "l40s" in t:
        return "l40s", []
    return None, notes


def model_name(hf_id: str) -> tuple[str | None, list[str]]:
    from kvplan.spec.profiles import model_index, profile_for_hf_id

    key = str(hf_id).strip().lower()
    if key in SAME_ARCHITECTURE:
        name, why = SAME_ARCHITECTURE[key]
        return name, [f"model {hf_id} served as profile {name}: {why}"]
    name = profile_for_hf_id(str(hf_id))
    if name is None and key.split("/")[-1] in model_index():
        name = key.split("/")[-1]
    return name, []


def _note(notes: str, pattern: str) -> str | None:
    m = re.search(pattern, notes)
    return m.group(1).replace(",", "") if m else None


def read_cases(path: Path) -> tuple[list[Case], list[Skipped]]:
    """Every row of the CSV as a `Case`, or a `Skipped` saying why kvplan cannot represent it."""
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise KvplanError(f"{path}: cannot read the calibration CSV ({exc})") from None
    cases: list[Case] = []
    skipped: list[Skipped] = []
    for i, row in frame.iterrows():
        result = _case(int(i), row.to_dict())  # type: ignore[arg-type]
        (cases if isinstance(result, Case) else skipped).append(result)  # type: ignore[arg-type]
    return cases, skipped


def _version(r: dict[str, Any], source: str, assumptions: list[str]) -> str:
    """The vLLM version whose scheduler and defaults time the row."""
    m = re.match(r"\s*v?(\d+\.\d+(?:\.\d+)?)", str(r.get("engine_version") or ""))
    if r.get("engine") == "sglang":
        assumptions.append("SGLang run: timed as vLLM 0.11 (V1) would run it; not in the fit")
        return "0.11.0"
    if m:
        return m.group(1)
    if "2024-08" in str(r.get("engine_version")):
        assumptions.append("main @ 2024-08-04 read as vLLM 0.5.4")
        return "0.5.4"
    version = DEFAULT_VERSION_BY_SOURCE.get(source, "0.11.0")
    assumptions.append(f"vLLM version not published: {version} assumed")
    return version


def _case(i: int, r: dict[str, Any]) -> Case | Skipped:
    source = source_of(r.get("source_url", ""))
    notes = str(r.get("notes") or "")
    assumptions: list[str] = []
    output_tok_s = _num(r.get("output_tok_s"))
    if output_tok_s is None:
        return Skipped(i, source, "no output throughput published")
    gpu, more = gpu_name(r.get("gpu", ""))
    if gpu is None:
        return Skipped(i, source, f"GPU {r.get('gpu')!r} is not in the catalog")
    assumptions += more
    model, more = model_name(r.get("model", ""))
    if model is None:
        return Skipped(i, source, f"model {r.get('model')!r} has no bundled profile")
    assumptions += more
    tp = _num(r.get("tp"))
    if tp is None:
        tp = _num(r.get("num_gpus")) or 1
        assumptions.append(f"tp not published: tp = num_gpus = {int(tp)}")
    version = _version(r, source, assumptions)
    completed = _num(r.get("completed")) or _num(r.get("num_prompts"))
    if completed is None:
        return Skipped(i, source, "neither completed nor num_prompts published")
    input_len, output_len = _num(r.get("input_len")), _num(r.get("output_len"))
    tot_in, tot_out = _note(notes, r"tot_in=([\d,]+)"), _note(notes, r"tot_out=([\d,]+)")
    if tot_in and tot_out:  # the run's real totals: chat templates add prompt tokens, no --ignore-eos ends early
        input_len, output_len = float(tot_in) / completed, float(tot_out) / completed
    if not input_len or not output_len:
        return Skipped(i, source, "no input/output length published")
    rate = _num(r.get("request_rate"))
    util = _note(notes, r"gpu_memory_utilization=([\d.]+)")
    kv_tokens = _note(notes, r"\(([\d,]+) tokens\) per startup log")
    kv_gib = None if kv_tokens else _note(notes, r"KV ([\d.]+) GiB")
    max_model_len = _num(r.get("max_model_len"))
    if max_model_len is None and source in DEFAULT_MAX_MODEL_LEN_BY_SOURCE:
        max_model_len = DEFAULT_MAX_MODEL_LEN_BY_SOURCE[source]
        assumptions.append(f"max_model_len not published: {max_model_len} as in the same repo's logged runs")
    hits = _note(notes, r"prefix-cache hit rate ([\d.]+)%")
    if hits:
        assumptions.append(f"prefix-cache hit rate {hits}% (server log) applied to every prompt")
    if kv_gib:
        assumptions.append(f"KV pool {kv_gib} GiB per GPU from the source's README (no start-up log)")
    quant = str(r.get("quantization") or "none").lower()
    if quant.startswith("fp8"):
        quant = "none" if "native" in quant else "fp8"  # a native fp8 checkpoint carries its own quantization
    mcl = _num(r.get("max_concurrency"))
    return Case(
        row=i,
        source=source,
        engine=str(r.get("engine") or "vllm"),
        model=model,
        gpu=gpu,
        tp=int(tp),
        vllm_version=version,
        input_len=max(1, round(input_len)),
        output_len=max(1, round(output_len)),
        num_prompts=int(completed),
        request_rate=math.inf if rate is None else rate,
        max_concurrency=int(mcl) if mcl else None,
        max_model_len=int(max_model_len) if max_model_len else None,
        max_num_seqs=int(v) if (v := _num(r.get("max_num_seqs"))) else None,
        max_num_batched_tokens=int(v) if (v := _num(r.get("max_num_batched_tokens"))) else None,
        gpu_memory_utilization=float(util) if util else 0.9,
        quantization=None if quant in ("none", "nan", "") else quant,
        kv_cache_tokens=int(kv_tokens) if kv_tokens else None,
        kv_cache_memory_bytes=int(float(kv_gib) * 2**30) if kv_gib else None,
        prefix_hit_rate=float(hits) / 100 if hits else 0.0,
        output_tok_s=output_tok_s,
        mean_tpot_ms=_num(r.get("mean_tpot_ms")),
        mean_ttft_ms=_num(r.get("mean_ttft_ms")),
        mean_e2e_ms=_num(r.get("mean_e2e_ms")),
        assumptions=tuple(assumptions),
    )
