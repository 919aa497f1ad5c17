"""A result file `vllm bench serve --save-result --save-detailed` wrote, read back as the workload
it ran (so `kvplan predict --vllm-result` predicts that very run) and the figures it measured. A
plain `--save-result` file (no per-request arrays) gives the run's settings (`num_prompts`,
`request_rate`, `burstiness`, `max_concurrency`) and its mean lengths; the lengths themselves then
come from the command line (`--random-input-len`, ...), checked against those means.

The workload: each request's prompt and output length (`input_lens`, `output_lens`) and when the
client meant to send it (`start_times` minus `queue_times`, the wait for a --max-concurrency slot,
from the first request; a file without `queue_times`, vLLM before 0.2x, is taken as sent on time),
and `max_concurrency`. Failed requests (an `errors` entry, output 0) are left out, and counted.
The measured figures: every top-level number under vLLM's own key (`median_ttft_ms`,
`output_throughput`, ...). A file that is not such a result is one line naming the missing key.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError, read_user_file
from kvplan.workload.limits import MAX_REQUESTS, MAX_TOKENS
from kvplan.workload.request import Request

MAX_RESULT_BYTES = 512 * 2**20
REQUIRED = ("input_lens", "output_lens", "start_times")
COMPARED = (
    "duration",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    *(f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "p99")),
)


@dataclass(frozen=True)
class BenchRun:
    requests: list[Request] | None  # None: a plain --save-result file (no per-request arrays)
    max_concurrency: int | None
    measured: dict[str, float]  # vLLM's keys
    failed: int
    model_id: str | None
    plain: PlainRun | None = None  # the run's settings, when the lengths must come from the command line


@dataclass(frozen=True)
class PlainRun:
    """What a plain `--save-result` file says of the load: the caller supplies the lengths."""

    num_prompts: int
    request_rate: float  # inf: all at once
    burstiness: float
    mean_input_tokens: float | None  # total_input_tokens / completed, to check the lengths given against
    mean_output_tokens: float | None


def _plain(p: Path, data: dict[str, Any]) -> BenchRun:
    """A result without per-request arrays: its num_prompts, rate, burstiness and concurrency."""
    def number(key: str, default: float | None = None) -> float | None:
        value = data.get(key, default)
        if value == "inf":
            return math.inf
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            return default
        return float(value)

    prompts = number("num_prompts")
    if prompts is None or not 0 < prompts <= MAX_REQUESTS or prompts != int(prompts):
        raise KvplanError(f"{p}: neither per-request arrays (--save-detailed) nor a num_prompts in "
                          f"1..{MAX_REQUESTS:,}: not a vllm bench serve result")
    rate, burst = number("request_rate", math.inf), number("burstiness", 1.0)
    if rate is None or not rate > 0 or burst is None or not burst > 0:
        raise KvplanError(f"{p}: request_rate and burstiness must be positive numbers (or rate \"inf\")")
    completed = number("completed")
    mean_in = number("total_input_tokens")
    mean_out = number("total_output_tokens")
    cap = data.get("max_concurrency")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0):
        raise KvplanError(f"{p}: max_concurrency must be a positive whole number or null, got {str(cap)[:40]!r}")
    measured = {
        k: float(data[k]) for k in COMPARED if isinstance(data.get(k), (int, float)) and not isinstance(data[k], bool)
    }
    plain = PlainRun(int(prompts), rate, burst, mean_in / completed if mean_in is not None and completed else None,
                     mean_out / completed if mean_out is not None and completed else None)
    failed = number("failed", 0.0) or 0.0
    return BenchRun(None, cap, measured, int(failed), data.get("model_id") if isinstance(data.get("model_id"), str)
                    else None, plain)


def _ints(path: Path, key: str, values: Any, n: int) -> list[int]:
    if not isinstance(values, list) or len(values) != n:
        raise KvplanError(f"{path}: {key} must be a list of {n} numbers (one per request), as vLLM writes it")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= MAX_TOKENS:
            raise KvplanError(
                f"{path}: {key} holds {str(v)[:40]!r}; token counts are whole numbers in 0..{MAX_TOKENS:,}"
            )
        out.append(int(v))
    return out


def _floats(path: Path, key: str, values: Any, n: int) -> list[float]:
    if not isinstance(values, list) or len(values) != n:
        raise KvplanError(f"{path}: {key} must be a list of {n} numbers (one per request), as vLLM writes it")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        raise KvplanError(f"{path}: {key} holds a value that is not a finite number of seconds")
    return [float(v) for v in values]


def load_vllm_bench_result(path: str | Path) -> BenchRun:
    p = Path(path)
    try:
        data = json.loads(read_user_file(p, "vllm bench result", max_bytes=MAX_RESULT_BYTES))
    except json.JSONDecodeError as exc:
        raise KvplanError(f"{p}: not JSON ({exc.msg} at line {exc.lineno}); give the file `vllm bench serve "
                          "--save-result --save-detailed` wrote") from None
    if not isinstance(data, dict):
        raise KvplanError(f"{p}: a vllm bench result is a JSON object, got a {type(data).__name__}")
    missing = [k for k in REQUIRED if k not in data]
    if len(missing) == len(REQUIRED):  # a plain --save-result: the lengths come from the command line
        return _plain(p, data)
    if missing:
        raise KvplanError(f"{p}: no {', '.join(missing)}: the per-request arrays come with `vllm bench serve "
                          "--save-result --save-detailed`")
    n = len(data["input_lens"]) if isinstance(data["input_lens"], list) else -1
    if not 0 < n <= MAX_REQUESTS:
        raise KvplanError(f"{p}: input_lens must list 1..{MAX_REQUESTS:,} requests")
    ins, outs = _ints(p, "input_lens", data["input_lens"], n), _ints(p, "output_lens", data["output_lens"], n)
    starts = _floats(p, "start_times", data["start_times"], n)
    queues = _floats(p, "queue_times", data["queue_times"], n) if data.get("queue_times") is not None else [0.0] * n
    errors: list[Any] = (
        data["errors"] if isinstance(data.get("errors"), list) and len(data["errors"]) == n else [""] * n
    )
    ok = [not e and o > 0 and i > 0 for e, i, o in zip(errors, ins, outs)]
    if not any(ok):
        raise KvplanError(f"{p}: no request succeeded in that run: nothing to predict")
    due = [s - q for s, q in zip(starts, queues)]
    t0 = min(d for d, good in zip(due, ok) if good)
    requests = sorted(
        (Request(d - t0, i, o) for d, i, o, good in zip(due, ins, outs, ok) if good), key=lambda r: r.arrival_s or 0.0
    )
    cap = data.get("max_concurrency")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0):
        raise KvplanError(f"{p}: max_concurrency must be a positive whole number or null, got {str(cap)[:40]!r}")
    measured = {
        k: float(data[k]) for k in COMPARED if isinstance(data.get(k), (int, float)) and not isinstance(data[k], bool)
    }
    return BenchRun(
        requests,
        cap,
        measured,
        ok.count(False),
        data.get("model_id") if isinstance(data.get("model_id"), str) else None,
    )


def compare(predicted: dict[str, Any], measured: dict[str, float]) -> list[tuple[str, float, float, float | None]]:
    """(key, predicted, measured, error %) for each figure both have; error = (predicted - measured)
    / measured: + means kvplan said slower / more, the one sign convention kvplan uses everywhere."""
    rows = []
    for key in COMPARED:
        if key in measured and isinstance(predicted.get(key), (int, float)):
            m, q = measured[key], float(predicted[key])
            rows.append((key, q, m, 100.0 * (q - m) / m if m else None))
    return rows
