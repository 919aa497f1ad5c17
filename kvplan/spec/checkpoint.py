"""Real weight bytes of a local checkpoint directory, without loading any tensor.

Headers and the index are read as untrusted input: a header length is checked against a sane
limit (and the file's size) before anything is read, the JSON must have the documented shape
(pydantic models of a header entry and of the index), and byte counts must be whole numbers in range. Anything else is
one `ConfigError` line naming the file.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from kvplan.errors import ConfigError, read_user_file
from kvplan.validation import FieldIssue, format_validation_error

MAX_HEADER_BYTES = 100 * 2**20  # the safetensors library's own limit on a header
MAX_INDEX_BYTES = 64 * 2**20
MAX_WEIGHT_BYTES = 2**53  # 8 PiB: past this a byte count is not a checkpoint, and float maths loses whole bytes


_WHOLE_BYTES = Annotated[int, Field(strict=True, ge=0, le=MAX_WEIGHT_BYTES)]


class _Tensor(BaseModel):
    """One header entry: `{"dtype": "F16", "shape": [..], "data_offsets": [start, end]}`."""

    model_config = ConfigDict(extra="allow")
    data_offsets: tuple[_WHOLE_BYTES, _WHOLE_BYTES]

    @model_validator(mode="after")
    def _ordered(self) -> _Tensor:
        if self.data_offsets[1] < self.data_offsets[0]:
            raise FieldIssue(("data_offsets",), f"start must not be past end, got {list(self.data_offsets)}")
        return self


class _IndexMetadata(BaseModel):
    model_config = ConfigDict(extra="allow")
    total_size: _WHOLE_BYTES | None = None

    @field_validator("total_size", mode="before")
    @classmethod
    def _whole_float(cls, v: Any) -> Any:
        return int(v) if isinstance(v, float) and v.is_integer() and abs(v) <= MAX_WEIGHT_BYTES else v


class _Index(BaseModel):
    """`model.safetensors.index.json`: the planner reads `metadata.total_size`."""

    model_config = ConfigDict(extra="allow")
    metadata: _IndexMetadata = Field(default_factory=_IndexMetadata)
    weight_map: dict[str, str] | None = None


_HEADER = TypeAdapter(dict[str, _Tensor])


def header_bytes(path: Path) -> int:
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
    except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, an integer over 4,300 digits
        raise ConfigError(f"{path}: bad safetensors header (not valid JSON: {type(exc).__name__})") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: bad safetensors header: must be a JSON object, got {type(header).__name__}")
    try:
        tensors = _HEADER.validate_python({k: v for k, v in header.items() if k != "__metadata__"})
    except ValidationError as exc:
        raise ConfigError(format_validation_error(f"{path}: bad safetensors header", exc)) from None
    return sum(t.data_offsets[1] - t.data_offsets[0] for t in tensors.values())


def index_total_bytes(index: Path) -> int | None:
    """`metadata.total_size` of a `model.safetensors.index.json`, checked; None when absent."""
    text = read_user_file(index, "safetensors index", max_bytes=MAX_INDEX_BYTES)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{index}: not valid JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{index}: must be a JSON object, got {type(data).__name__}")
    try:
        return _Index.model_validate(data).metadata.total_size
    except ValidationError as exc:
        raise ConfigError(format_validation_error(str(index), exc, _Index)) from None


def checkpoint_bytes(directory: Path) -> int | None:
    """`model.safetensors.index.json` metadata.total_size, else safetensors headers, else None."""
    index = directory / "model.safetensors.index.json"
    if index.exists():
        total = index_total_bytes(index)
        if total:
            return total
    files = sorted(directory.glob("*.safetensors"))
    if files:
        total = sum(header_bytes(f) for f in files)
        if total > MAX_WEIGHT_BYTES:
            raise ConfigError(
                f"{directory}: safetensors headers add up to {total:,} bytes; more than {MAX_WEIGHT_BYTES:,}"
            )
        return total
    return None
