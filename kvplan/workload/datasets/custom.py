"""custom: JSON lines (or a CSV with a header) of `prompt` text and/or `input_len` (a token count),
and optionally `output_len` (else `output_tokens`, vLLM's `--custom-output-len`, default 256). Rows
of lengths only are the way to replay a production trace's shape without its text. Rows are
shuffled as vLLM shuffles them (seeded) unless --disable-shuffle. Unlike vLLM's custom dataset, no
chat template is applied: a `--api chat` run wraps the text in one user message."""
from __future__ import annotations

import csv
import io
import json
import random
from pathlib import Path
from typing import Any

from kvplan.workload.datasets.ref import DatasetRef
from kvplan.workload.datasets.source import MAX_ROWS, ReadContext, dataset_error, read_dataset_text
from kvplan.workload.limits import MAX_TOKENS
from kvplan.workload.request import Request

CUSTOM_OUTPUT_TOKENS = 256  # vLLM's --custom-output-len default
LENGTH_KEYS = {"input_len": ("input_len", "prompt_len", "input_tokens", "prompt_tokens"),
               "output_len": ("output_len", "output_tokens", "max_tokens")}


def rows(path: Path) -> list[dict[str, Any]]:
    """The file's rows: a CSV's records, else one JSON object a line."""
    text = read_dataset_text(path)
    if path.suffix.lower() == ".csv":
        try:
            reader = csv.DictReader(io.StringIO(text))
            return [row for row, _ in zip(reader, range(MAX_ROWS))]
        except csv.Error as exc:
            raise dataset_error(path, f"not a CSV file: {exc}") from None
    out = []
    for number, line in enumerate(text.splitlines()[:MAX_ROWS], 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise dataset_error(path, f"line {number}: not a JSON object: {exc.msg}") from None
        if not isinstance(row, dict):
            raise dataset_error(
                path, f'line {number}: a JSON line is an object such as {{"prompt": "...", "output_len": 128}}'
            )
        out.append(row)
    return out


def row_length(path: Path, number: int, row: dict[str, Any], key: str) -> int | None:
    """The row's `input_len` or `output_len` under any of its names; None when absent."""
    for name in LENGTH_KEYS[key]:
        value = row.get(name)
        if value is None or value == "":
            continue
        try:
            n = int(value) if not isinstance(value, bool) and float(value) == int(float(value)) else None
        except (TypeError, ValueError, OverflowError):
            n = None
        if n is None or not 0 < n <= MAX_TOKENS:
            raise dataset_error(
                path, f"row {number}: {name} must be a whole number of tokens in 1..{MAX_TOKENS:,}, "
                f"got {str(value)[:40]!r}"
            )
        return n
    return None


def read(ref: DatasetRef, path: Path, ctx: ReadContext) -> list[Request]:
    out: list[Request] = []
    too_long = 0
    numbered = list(enumerate(rows(path), 1))
    if ref.shuffle:  # vLLM's CustomDataset: random.seed(seed); random.shuffle(rows) unless --disable-shuffle
        random.Random(ctx.seed).shuffle(numbered)
    for number, row in numbered:
        text = row.get("prompt")
        if text is not None and not isinstance(text, str):
            raise dataset_error(path, f"row {number}: prompt must be text, got {type(text).__name__}")
        n_in = row_length(path, number, row, "input_len")
        if text is not None:
            ids = ctx.counter.fold(ctx.counter.ids(text))
        elif n_in is not None:
            ids = ctx.counter.length_ids(n_in, ctx.seed * 1_000_003 + number)
        else:
            raise dataset_error(
                path,
                f"row {number}: give `prompt` (text) or `input_len` (tokens); it has {', '.join(row) or 'no keys'}",
            )
        output = ref.output_tokens or row_length(path, number, row, "output_len") or CUSTOM_OUTPUT_TOKENS
        if len(ids) + output > ctx.max_model_len:
            too_long += 1
            continue
        out.append(Request.of_ids(ids, output, None, prompt_text=text))
    if too_long:
        ctx.notes.append(f"{too_long:,} rows skipped: longer than max_model_len {ctx.max_model_len:,}")
    return out
