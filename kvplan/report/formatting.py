"""Human text for figures: units, missing values as an em dash (never a misleading 0), and the
prediction's error the way `kvplan stress` prints it."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kvplan.units import MIB


def fmt(value: Any, unit: str = "") -> str:
    """Human text for a figure; `—` for missing (never a misleading 0)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float) and math.isinf(value):  # an interrupted run's rate over no time: nothing was measured
        return "not measured"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, (int, float)):
        return str(value)
    if unit == "bytes":
        return f"{value / MIB:,.2f} MiB" if abs(value) >= MIB / 8 else f"{int(value):,} B"
    if unit == "ratio":
        return f"{100 * value:.1f}%"
    if unit == "ms":
        return f"{value:,.1f} ms" if abs(value) >= 10 else f"{value:,.2f} ms"
    if unit in ("s", "req/s", "tok/s"):
        return f"{value:,.2f} {unit}" if abs(value) < 1000 else f"{value:,.0f} {unit}"
    return f"{value:,}" if isinstance(value, int) or float(value).is_integer() else f"{value:,.3g}"


def fmt_pct(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{round(value, 1) + 0.0:+.1f}%"  # + 0.0: a -1e-14 rounding residue reads +0.0%, not -0.0%


def fmt_named(key: str, value: Any) -> str:
    """A figure named with its unit (`intercept_s`, `reference_kernel_ms`, `residual_p90_pct`,
    `cpu_wait_share`, `kv_pool_bytes`): its value in that unit, three significant digits."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return describe_value(value) if isinstance(value, (Mapping, list)) else fmt(value)
    if not math.isfinite(float(value)):
        return fmt(value)
    if key.endswith("_bytes"):
        return fmt(value, "bytes")
    if key.endswith("_pct"):
        return f"{value:+.1f}%"
    if key.endswith("_share") or key.endswith("_ratio") and abs(value) <= 1:
        return f"{100 * value:.1f}%"
    if key.endswith("_ms"):
        return fmt(value, "ms")
    if key.endswith("_s"):
        for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
            if abs(value) >= scale or unit == "ns":
                return f"{value / scale:.3g} {unit}"
    if isinstance(value, float):
        return f"{value:.3g}"
    return f"{value:,}"


def setting_text(key: str, value: Any) -> str:
    if key.endswith("_bytes") and isinstance(value, int) and not isinstance(value, bool) and value:
        return f"{fmt(value, 'bytes')} ({value:,} B)"
    return describe_value(value)


def describe_value(value: Any) -> str:
    """Compact text for scenario sub-mappings: `{dist: uniform, min: 32, max: 160}`."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {describe_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(describe_value(v) for v in value) + "]"
    return str(value)
