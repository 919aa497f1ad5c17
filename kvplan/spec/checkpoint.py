"""Real weight bytes of a local checkpoint directory, without loading any tensor."""
from __future__ import annotations

import json
import struct
from pathlib import Path

from kvplan.errors import ConfigError

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
