"""Read a vLLM calibration CSV (one row per logged `vllm serve` start-up: GPU, utilization, TP,
dtypes, max_model_len and the logged KV figures) and replay each row through `plan_capacity`
(used by `tests/plan/test_budget.py` and `benchmarks/vllm_accuracy.py`)."""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from kvplan.plan.budget import CapacityPlan, plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.overheads import V1_SINCE, parse_vllm_version
from kvplan.spec.gpu import custom_gpu
from kvplan.spec.model import ModelSpec
from kvplan.spec.profiles import load_model
from kvplan.units import GIB

# Hugging Face id in the CSV -> bundled profile (which carries the checkpoint's real bytes).
PROFILE_OF = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b-instruct",
    "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b-instruct",
    "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
    "google/gemma-3-27b-it": "gemma-3-27b-it",
}


@dataclass(frozen=True)
class CalibrationRow:
    index: int  # 1-based data row in the CSV
    raw: dict[str, str]

    def f(self, key: str) -> float | None:
        v = self.raw.get(key, "").strip()
        return float(v) if v else None

    @property
    def skip_reason(self) -> str | None:
        """Why a row cannot be replayed end to end, KV tokens included (None when it can)."""
        if not self.raw.get("reported_kv_tokens", "").strip():
            return "no reported KV tokens/blocks (V0 log excerpt; dtype and max_model_len not logged)"
        if self.raw["model"] not in PROFILE_OF:
            return f"no bundled profile for {self.raw['model']}"
        return None

    def spec(self) -> ModelSpec:
        return load_model(PROFILE_OF[self.raw["model"]])

    @property
    def version_group(self) -> str:
        """The vLLM generation whose budget rules the row exercises."""
        v = parse_vllm_version(self.raw["vllm_version"])
        if v < V1_SINCE or "(V0" in self.raw["vllm_version"]:  # 0.8-0.9 could still run V0 (VLLM_USE_V1=0)
            return "V0"
        if v < (0, 10, 0):
            return "early V1 (0.8-0.9)"
        return "V1 0.10-0.18" if v < (0, 19, 0) else "V1 0.19+"

    @property
    def gpu_group(self) -> str:
        return self.raw["gpu"].split(" (")[0]

    def error(self, plan: CapacityPlan) -> tuple[str, float] | None:
        """(what is compared, signed relative error): KV tokens when the log has them, else the
        available KV cache memory; None when the row logs neither."""
        r = self.raw
        if r.get("reported_kv_tokens", "").strip():
            rep = int(r["reported_kv_tokens"])
            return "tokens", (plan.kv_cache_tokens - rep) / rep
        if r.get("available_kv_gib", "").strip():
            rep_bytes = float(r["available_kv_gib"]) * GIB
            return "KV GiB", (plan.available_kv_cache_bytes - rep_bytes) / rep_bytes
        if r.get("weights_gib", "").strip():  # a start-up that failed after loading: its weights still check
            rep_bytes = float(r["weights_gib"]) * GIB
            return "weights", (plan.weights_bytes - rep_bytes) / rep_bytes
        return None

    def args(self, *, kv_cache_memory_bytes: int | None = None) -> EngineArgs:
        """Only what a user knows before starting vLLM: GPU total, utilization, TP, dtype, KV dtype,
        max_model_len and the version (batch sizes and block size left to their defaults)."""
        r = self.raw
        if not r["gpu_mem_gib"]:  # the log names no GPU size (weights-only rows): plan on the KV bytes alone
            kv_cache_memory_bytes = kv_cache_memory_bytes or 0
        return EngineArgs(
            gpu=custom_gpu(float(r["gpu_mem_gib"])) if r["gpu_mem_gib"] else None,
            gpu_memory_utilization=float(r["gpu_memory_utilization"] or 0.9),
            tensor_parallel_size=int(r["tp"]), dtype=r["dtype"] or "auto", kv_cache_dtype=r["kv_cache_dtype"] or "auto",
            max_model_len=int(r["max_model_len"]) if r["max_model_len"] else None,
            block_size=int(r["block_size"]) if r["block_size"] else 16,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            vllm_version=r["vllm_version"].split()[0],
        )

    def plan(self) -> CapacityPlan:
        return plan_capacity(self.spec(), self.args())

    def logged_kv_bytes(self, offset_gib: float = 0.0) -> int:
        return round((float(self.raw["available_kv_gib"]) + offset_gib) * GIB)


def load_calibration(path: Path) -> list[CalibrationRow]:
    with Path(path).open(newline="") as fh:
        return [CalibrationRow(i, row) for i, row in enumerate(csv.DictReader(fh), start=1)]
