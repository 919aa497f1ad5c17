"""`RunResult`: one `kvplan stress` run as `result.json`, written atomically.

`schema_version` bumps on any incompatible change; `load_result` refuses other versions with one
line rather than half-reading them. Times are seconds on the run's clock (0 = run start).
"""
from __future__ import annotations

import json
import os
import platform
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kvplan.errors import KvplanError, read_user_file
from kvplan.files import write_text_atomic
from kvplan.results.figures import RENAMED_FIGURES
from kvplan.results.record import RequestRecord
from kvplan.results.result_checks import check_result_data
from kvplan.validation import FieldIssue, format_validation_error, number_problem, path_text

SCHEMA_VERSION: Final = 1
MAX_RESULT_BYTES = 1 << 30  # a million-request run is a few hundred MB


class Environment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    python: str
    platform: str
    cpu_count: int | None = None
    kvplan: str | None = None
    torch: str | None = None
    transformers: str | None = None
    numpy: str | None = None
    device: str = "cpu"
    device_name: str | None = None  # e.g. torch.cuda.get_device_name(); the CPU's name on CPU
    git_commit: str | None = None
    cpu_model: str | None = None  # /proc/cpuinfo's model name
    # the engine's intra-op threads, how they were chosen (engine/threads.py), the cores this
    # process could use and the other runnable tasks seen when choosing
    engine_threads: int | None = None
    threads_how: str | None = None
    usable_cores: int | None = None
    busy_elsewhere: float | None = None
    # where the cost model came from differs from this machine (machine_facts.py); empty: same or unknown
    calibration_mismatch: list[str] = Field(default_factory=list)


class TimelineSample(BaseModel):
    """One memory/engine sample. Known fields below; a newer runner may add counters (kept as is)."""

    model_config = ConfigDict(extra="allow", strict=True)  # "7" is not a count: a tampered file is bad input
    t_s: float
    kv_bytes_used: int | None = None
    kv_pool_bytes: int | None = None
    kv_blocks_used: int | None = None
    running: int | None = None
    waiting: int | None = None
    swapped: int | None = None
    preemptions: int | None = None  # cumulative
    prefix_hit_tokens: int | None = None  # cumulative
    evicted_blocks: int | None = None  # cumulative: cached blocks a new allocation took the hash from
    cpu_hit_tokens: int | None = None  # cumulative: prompt tokens a CPU tier served
    computed_prompt_tokens: int | None = None  # cumulative: prompt tokens neither cache served
    swaps: int | None = None  # cumulative
    rss_bytes: int | None = None
    cuda_allocated_bytes: int | None = None
    cuda_max_allocated_bytes: int | None = None
    nvml_used_bytes: int | None = None


class RunResult(BaseModel):
    # NaN/inf are not JSON: they are written as null
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="null")

    schema_version: Literal[1] = SCHEMA_VERSION
    created_at: str = Field(
        default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"), max_length=64
    )
    scenario: dict[str, Any]  # Scenario.to_dict(): parse_scenario accepts it back
    allocator: Literal["paged", "contiguous"] = "paged"
    environment: Environment
    prediction: dict[str, Any] = Field(default_factory=dict)
    requests: list[dict[str, Any]] = Field(default_factory=list)  # RequestRecord.to_dict()
    metrics: dict[str, Any] = Field(default_factory=dict)  # results.metrics.compute_metrics + memory figures
    # the prediction's error after rescaling it by the measured machine speed (machine_speed.py)
    normalized_error_pct: dict[str, float] = Field(default_factory=dict)
    per_class: dict[str, dict[str, Any]] = Field(default_factory=dict)
    timeline: list[TimelineSample] = Field(default_factory=list)
    complete: bool = True  # False: interrupted (Ctrl-C) or failed; what is here is what was measured
    # "failed": more requests errored than the scenario's max_error_rate allows (exit 1); `errors`
    # holds the first distinct error messages (already scrubbed of secrets by the target)
    verdict: Literal["ok", "failed"] = "ok"
    errors: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    # HTTP targets: the server's own /metrics samples ({t_s, kv_cache_usage_perc,
    # num_requests_running, num_requests_waiting, ...}) and what it says about itself
    server_telemetry: list[dict[str, float | None]] = Field(default_factory=list)  # numbers only: plotted
    server_info: dict[str, Any] = Field(default_factory=dict)

    @field_validator("created_at")
    @classmethod
    def _iso_time(cls, v: str) -> str:
        try:
            datetime.fromisoformat(v)
        except ValueError:
            raise ValueError("must be an ISO 8601 time such as 2026-01-31T12:00:00+00:00") from None
        return v

    @property
    def scenario_name(self) -> str:
        return str(self.scenario.get("name", ""))

    def records(self) -> list[RequestRecord]:
        return [RequestRecord.from_dict(r) for r in self.requests]

    def to_json(self) -> str:
        return self.model_dump_json(indent=1)

    def write_atomic(self, path: str | Path) -> Path:
        """Write to a temp file beside `path`, fsync, then `os.replace`: readers see the old file
        or the whole new one, never half of it. Serialisation happens before any file exists."""
        return write_text_atomic(path, self.to_json())


def load_result(path: str | Path) -> RunResult:
    """Read a result.json; a missing, malformed or wrong-schema file is one `KvplanError` line."""
    p = Path(path)
    text = read_user_file(p, "result", max_bytes=MAX_RESULT_BYTES)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise KvplanError(f"{p}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise KvplanError(f"{p}: JSON nested too deeply to be a kvplan result") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise KvplanError(f"{p}: {number_problem(exc)}") from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise KvplanError(f"{p}: not a kvplan result (no schema_version)")
    _rename_old_keys(data)
    if data["schema_version"] != SCHEMA_VERSION:
        raise KvplanError(f"{p}: result schema_version {data['schema_version']!r} is not supported "
                          f"(this kvplan reads {SCHEMA_VERSION})")
    try:
        check_result_data(data)
    except FieldIssue as exc:
        raise KvplanError(f"{p}: not a valid kvplan result: {path_text(exc.subpath)}: {exc.message}") from None
    try:
        return RunResult.model_validate(data)
    except RecursionError:
        raise KvplanError(f"{p}: JSON nested too deeply to be a kvplan result") from None
    except ValidationError as exc:
        raise KvplanError(format_validation_error(f"{p}: not a valid kvplan result", exc, RunResult)) from None


def _rename_old_keys(data: dict[str, Any]) -> None:
    """Results written before a figure's rename load under its new name."""
    for section in ("metrics", "prediction"):
        figures = data.get(section)
        if isinstance(figures, dict):
            for old, new in RENAMED_FIGURES.items():
                if old in figures and new not in figures:
                    figures[new] = figures.pop(old)
    gate = data.get("scenario", {}).get("gate") if isinstance(data.get("scenario"), dict) else None
    if isinstance(gate, dict):  # the embedded scenario's gate names figures too
        if isinstance(gate.get("exact"), list):
            gate["exact"] = [RENAMED_FIGURES.get(k, k) if isinstance(k, str) else k for k in gate["exact"]]
        if isinstance(gate.get("relative"), dict):
            gate["relative"] = {
                RENAMED_FIGURES.get(k, k) if isinstance(k, str) else k: v for k, v in gate["relative"].items()
            }
    per_class = data.get("per_class")
    if isinstance(per_class, dict):
        for figures in per_class.values():
            if isinstance(figures, dict):
                for old, new in RENAMED_FIGURES.items():
                    if old in figures and new not in figures:
                        figures[new] = figures.pop(old)


# --- environment ------------------------------------------------------------------------------
def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def git_commit(start: str | Path | None = None) -> str | None:
    """HEAD's commit of the repository holding `start`, read from .git (no git process)."""
    here = Path(start or Path(__file__).resolve().parent).resolve()
    for d in (here, *here.parents):
        git = d / ".git"
        if git.is_file():  # a worktree or submodule: "gitdir: PATH"
            line = git.read_text().strip()
            git = (d / line.removeprefix("gitdir:").strip()).resolve() if line.startswith("gitdir:") else git
        if not git.is_dir():
            continue
        try:
            head = (git / "HEAD").read_text().strip()
            if not head.startswith("ref:"):
                return head or None
            ref = head.removeprefix("ref:").strip()
            common = git / "commondir"
            base = (git / common.read_text().strip()).resolve() if common.exists() else git
            for root in (git, base):
                if (root / ref).exists():
                    return (root / ref).read_text().strip()
            for line in (base / "packed-refs").read_text().splitlines():
                if line.endswith(" " + ref):
                    return line.split()[0]
        except OSError:
            return None
        return None
    return None


def collect_environment(device: str = "cpu", device_name: str | None = None, threads: Any = None) -> Environment:
    """Versions and machine facts; reads package metadata only (imports neither torch nor
    transformers). The runner passes `device_name` (torch.cuda.get_device_name) on CUDA and the
    engine's `ThreadChoice`."""
    from kvplan.results.machine_facts import cpu_model

    return Environment(
        python=sys.version.split()[0], platform=platform.platform(), cpu_count=os.cpu_count(),
        kvplan=_version("kvplan"), torch=_version("torch"), transformers=_version("transformers"),
        numpy=_version("numpy"), device=device, device_name=device_name or (platform.processor() or platform.machine()),
        git_commit=git_commit(), cpu_model=cpu_model(),
        engine_threads=getattr(threads, "threads", None), threads_how=getattr(threads, "how", None),
        usable_cores=getattr(threads, "usable_cores", None), busy_elsewhere=getattr(threads, "busy_elsewhere", None),
    )
