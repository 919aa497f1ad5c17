"""Byte units (GiB = 2**30) and their human-readable forms."""
from __future__ import annotations

KIB, MIB, GIB = 2**10, 2**20, 2**30


def fmt_bytes(n: float) -> str:
    """1536 -> '1.50 KiB'; exact small values stay in bytes."""
    n = float(n)
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,.0f} B"
