"""Real weight bytes of a local checkpoint directory, without loading any tensor.

Headers and the index are read as untrusted input: a header length is checked against a sane
limit (and the file's size) before anything is read, the JSON must have the documented shape, and
byte counts must be whole numbers in range. Anything else is one `ConfigError` line naming the file.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from kvplan.errors import ConfigError, read_user_file
from kvplan.validation import short_repr

MAX_HEADER_BYTES = 100 * 2**20  # the safetensors library's own limit on a header
MAX_INDEX_BYTES = 64 * 2**20
MAX_WEIGHT_BYTES = 2**53  # 8 PiB: past this a byte count is not a checkpoint, and float maths loses whole bytes


def _offsets(path: Path, name: str, info: Any) -> int:
    """Bytes of one tensor entry `{"data_offsets": [start, end], ...}`."""
    offsets = info.get("data_offsets") if isinstance(info, dict) else None
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_WEIGHT_BYTES for v in offsets)
            or offsets[1] < offsets[0]):
        raise ConfigError(f"{path}: bad safetensors header: tensor {short_repr(name)} needs data_offsets "
                          f"[start, end] (whole numbers, start <= end), got {short_repr(offsets if isinstance(info, dict) else info)}")
    return offsets[1] - offsets[0]


def _header_bytes(path: Path) -> int:
    """Sum of tensor byte ranges from a .safetensors header (8-byte little-endian length + JSON)."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise ConfigError(f"{path}: truncated safetensors file")
            (length,) = struct.unpack("<Q", raw)
            size = path.stat().st_size
            if length > MAX_HEADER_BYTES or length > size - 8:
                raise ConfigError(f"{path}: bad safetensors header: length {length:,} bytes (the file has {size:,}; "
                                  f"the limit is {MAX_HEADER_BYTES:,})")
            header = json.loads(fh.read(length))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or type(exc).__name__})") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"{path}: bad safetensors header (not valid JSON: {type(exc).__name__})") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: bad safetensors header: must be a JSON object, got {type(header).__name__}")
    return sum(_offsets(path, name, info) for name, info in header.items() if name != "__metadata__")


def _index_total(index: Path) -> int | None:
    """`metadata.total_size` of a `model.safetensors.index.json`, checked; None when absent."""
    text = read_user_file(index, "safetensors index", max_bytes=MAX_INDEX_BYTES)
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(f"{index}: not valid JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{index}: must be a JSON object, got {type(data).__name__}")
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ConfigError(f"{index}: metadata must be a JSON object, got {short_repr(metadata)}")
    total = metadata.get("total_size")
    if total is None:
        return None
    if isinstance(total, bool) or not isinstance(total, (int, float)) or total != total or not 0 <= total <= MAX_WEIGHT_BYTES \
            or int(total) != total:
        raise ConfigError(f"{index}: metadata.total_size must be a whole number of bytes in 0..{MAX_WEIGHT_BYTES:,}, "
                          f"got {short_repr(total)}")
    return int(total)


def checkpoint_bytes(directory: Path) -> int | None:
    """`model.safetensors.index.json` metadata.total_size, else safetensors headers, else None."""
    index = directory / "model.safetensors.index.json"
    if index.exists():
        total = _index_total(index)
        if total:
            return total
    files = sorted(directory.glob("*.safetensors"))
    if files:
        total = sum(_header_bytes(f) for f in files)
        if total > MAX_WEIGHT_BYTES:
            raise ConfigError(f"{directory}: safetensors headers add up to {total:,} bytes; more than {MAX_WEIGHT_BYTES:,}")
        return total
    return None
