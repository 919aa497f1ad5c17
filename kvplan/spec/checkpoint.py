"""Real weight bytes of a local checkpoint directory, without loading any tensor."""
from __future__ import annotations

import json
import struct
from pathlib import Path

from kvplan.errors import ConfigError

_SAFETENSORS_DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
    "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "U32": 4, "U16": 2, "F4": 1,
}


def _header_bytes(path: Path) -> int:
    """Sum of tensor byte ranges from a .safetensors header (8-byte length + JSON)."""
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ConfigError(f"{path}: truncated safetensors file")
        (length,) = struct.unpack("<Q", raw)
        try:
            header = json.loads(fh.read(length))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: bad safetensors header ({exc})") from None
    total = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        total += end - start
    return total


def checkpoint_bytes(directory: Path) -> int | None:
    """`model.safetensors.index.json` metadata.total_size, else safetensors headers, else None."""
    index = directory / "model.safetensors.index.json"
    if index.exists():
        try:
            total = json.loads(index.read_text()).get("metadata", {}).get("total_size")
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{index}: not valid JSON ({exc})") from None
        if total:
            return int(total)
    files = sorted(directory.glob("*.safetensors"))
    if files:
        return sum(_header_bytes(f) for f in files)
    return None
