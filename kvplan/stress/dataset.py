"""Real request files replayed as a run's requests, read as `vllm bench serve --dataset-name` reads them.

- sharegpt: a JSON list of `{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}, ...]}`.
  As vLLM's ShareGPTDataset: entries with fewer than two turns are dropped, the list is shuffled with
  Python's `random` seeded by the scenario's seed, the first turn is the prompt and the second's token
  count the output length (or `output_tokens`, vLLM's `--sharegpt-output-len`), and a pair is kept only
  if the prompt has 4..1024 tokens, the output at least 4 (unless fixed) and both together at most 2048.
- custom: JSON lines (or a CSV with a header) of `prompt` text and/or `input_len` (a token count), and
  optionally `output_len` (else `output_tokens`, vLLM's `--custom-output-len`, default 256). Rows of
  lengths only are the way to replay a production trace's shape without its text. Unlike vLLM's custom
  dataset, no chat template is applied: a `--api chat` run wraps the text in one user message instead.
- burstgpt: BurstGPT's CSV (`Model`, `Request tokens`, `Response tokens`, ...). As vLLM: the GPT-4 rows with
  a positive response, sampled with pandas' `sample(random_state=seed)` (with replacement when too few).

Token counts of text come from `tokenizer` (a local directory or a repo already in the Hugging Face cache;
nothing is downloaded), counted as vLLM counts them (`tokenizer(text).input_ids`). Without one they are
estimated at 4 UTF-8 bytes a token, and a note says so. Token ids for the bundled engine and the
prediction: the tokenizer's, folded into the model's vocabulary; without a tokenizer one id per 4-byte
chunk of the text (hashed), so repeated prompts and shared prefixes still share ids and prefix-cache
blocks. Requests longer than the scenario's max_model_len are skipped and counted in a note.
More requests than the file holds: vLLM's oversampling (`random.choices` of the kept ones, seeded).
Bounds: files up to MAX_DATASET_BYTES, at most MAX_ROWS rows read.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError, read_user_file
from kvplan.stress.scenario import SPECIAL_TOKEN_IDS, DatasetRef

MAX_DATASET_BYTES = 2 * 2**30  # ShareGPT_V3_unfiltered_cleaned_split.json is 642 MB
MAX_ROWS = 5_000_000
BYTES_PER_TOKEN_GUESS = 4  # English text in current BPE vocabularies: ~4 bytes a token
SHAREGPT_MIN_TOKENS, SHAREGPT_MAX_PROMPT_TOKENS, SHAREGPT_MAX_TOTAL_TOKENS = 4, 1024, 2048  # vLLM's is_valid_sequence
CUSTOM_OUTPUT_TOKENS = 256  # vLLM's --custom-output-len default
LENGTH_KEYS = {"input_len": ("input_len", "prompt_len", "input_tokens", "prompt_tokens"),
               "output_len": ("output_len", "output_tokens", "max_tokens")}


@dataclass(frozen=True)
class DatasetRequest:
    prompt_text: str | None  # None: a row of lengths only
    prompt_token_ids: tuple[int, ...]
    output_tokens: int


@dataclass
class DatasetStream:
    """The requests in replay order (`take(n)`), and notes on how they were read."""

    requests: list[DatasetRequest]
    oversample: Callable[[int], list[DatasetRequest]]
    notes: list[str] = field(default_factory=list)

    def take(self, n: int | None) -> Iterator[DatasetRequest]:
        """The first `n` (None: forever); past the file's end, vLLM's seeded oversampling."""
        yield from self.requests[:n]
        if n is None:
            while True:
                yield from self.oversample(len(self.requests))
        elif n > len(self.requests):
            yield from self.oversample(n - len(self.requests))


class _Counter:
    """Token counts and ids of text: a real tokenizer, or the 4-bytes-a-token estimate."""

    def __init__(self, tokenizer_name: str | None, vocab_size: int) -> None:
        self.vocab = vocab_size
        self.tok = None
        if tokenizer_name is not None:
            from kvplan.stress.targets.prompt_text import load_prompt_tokenizer

            self.tok = load_prompt_tokenizer(tokenizer_name)

    def ids(self, text: str) -> list[int]:
        if self.tok is not None:
            return list(self.tok(text).input_ids)
        data = text.encode("utf-8", "replace")
        return [int.from_bytes(hashlib.blake2b(data[i:i + BYTES_PER_TOKEN_GUESS], digest_size=8).digest(), "little")
                for i in range(0, max(len(data), 1), BYTES_PER_TOKEN_GUESS)]

    def count(self, text: str) -> int:
        if self.tok is not None:
            return len(self.tok(text).input_ids)
        return max(1, math.ceil(len(text.encode("utf-8", "replace")) / BYTES_PER_TOKEN_GUESS))

    def fold(self, ids: list[int]) -> tuple[int, ...]:
        span = self.vocab - SPECIAL_TOKEN_IDS
        return tuple(SPECIAL_TOKEN_IDS + t % span for t in ids)

    def length_ids(self, n: int, seed: int) -> tuple[int, ...]:
        """Ids for a row of lengths only: `n` ids from the row's own seed."""
        rng = random.Random(seed)
        return tuple(rng.randrange(SPECIAL_TOKEN_IDS, self.vocab) for _ in range(n))


def _read_text(path: Path) -> str:
    return read_user_file(path, "dataset", max_bytes=MAX_DATASET_BYTES)


def _bad(path: Path, what: str) -> KvplanError:
    return KvplanError(f"dataset {path}: {what}")


def _sharegpt(ref: DatasetRef, path: Path, seed: int, counter: _Counter, max_len: int, num: int | None,
              notes: list[str]) -> list[DatasetRequest]:
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise _bad(path, f"not ShareGPT JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(data, list):
        raise _bad(path, f"ShareGPT JSON is a list of conversations, got a {type(data).__name__}")
    data = [e for e in data[:MAX_ROWS] if isinstance(e, dict) and isinstance(e.get("conversations"), list)
            and len(e["conversations"]) >= 2]
    random.Random(seed).shuffle(data)  # vLLM: random.seed(seed); random.shuffle(data): the same order
    out: list[DatasetRequest] = []
    skipped = too_long = 0
    for entry in data:
        if num is not None and len(out) >= num:
            break
        turns = entry["conversations"]
        prompt, completion = (t.get("value") if isinstance(t, dict) else None for t in turns[:2])
        if not isinstance(prompt, str) or not isinstance(completion, str):
            skipped += 1
            continue
        ids = counter.ids(prompt)
        output = ref.output_tokens if ref.output_tokens is not None else counter.count(completion)
        if (len(ids) < SHAREGPT_MIN_TOKENS or (ref.output_tokens is None and output < SHAREGPT_MIN_TOKENS)
                or len(ids) > SHAREGPT_MAX_PROMPT_TOKENS or len(ids) + output > SHAREGPT_MAX_TOTAL_TOKENS):
            skipped += 1
            continue
        if len(ids) + output > max_len:
            too_long += 1
            continue
        out.append(DatasetRequest(prompt, counter.fold(ids), output))
    if skipped:
        notes.append(f"{skipped:,} ShareGPT conversations skipped by vLLM's length filter (prompt 4..1024 tokens, "
                     "output >= 4, together <= 2048) or for lacking text")
    if too_long:
        notes.append(f"{too_long:,} ShareGPT conversations skipped: longer than max_model_len {max_len:,}")
    return out


def _rows(path: Path) -> list[dict[str, Any]]:
    text = _read_text(path)
    if path.suffix.lower() == ".csv":
        try:
            reader = csv.DictReader(io.StringIO(text))
            return [row for row, _ in zip(reader, range(MAX_ROWS))]
        except csv.Error as exc:
            raise _bad(path, f"not a CSV file: {exc}") from None
    rows = []
    for number, line in enumerate(text.splitlines()[:MAX_ROWS], 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _bad(path, f"line {number}: not a JSON object: {exc.msg}") from None
        if not isinstance(row, dict):
            raise _bad(path, f'line {number}: a JSON line is an object such as {{"prompt": "...", "output_len": 128}}')
        rows.append(row)
    return rows


def _length(path: Path, number: int, row: dict[str, Any], key: str) -> int | None:
    for name in LENGTH_KEYS[key]:
        value = row.get(name)
        if value is None or value == "":
            continue
        try:
            n = int(value) if not isinstance(value, bool) and float(value) == int(float(value)) else None
        except (TypeError, ValueError, OverflowError):
            n = None
        if n is None or not 0 < n <= 10_000_000:
            raise _bad(
                path, f"row {number}: {name} must be a whole number of tokens in 1..10,000,000, got {str(value)[:40]!r}"
            )
        return n
    return None


def _custom(
    ref: DatasetRef, path: Path, seed: int, counter: _Counter, max_len: int, notes: list[str]
) -> list[DatasetRequest]:
    out, too_long = [], 0
    for number, row in enumerate(_rows(path), 1):
        text = row.get("prompt")
        if text is not None and not isinstance(text, str):
            raise _bad(path, f"row {number}: prompt must be text, got {type(text).__name__}")
        n_in = _length(path, number, row, "input_len")
        if text is None and n_in is None:
            raise _bad(
                path,
                f"row {number}: give `prompt` (text) or `input_len` (tokens); it has {', '.join(row) or 'no keys'}",
            )
        output = ref.output_tokens or _length(path, number, row, "output_len") or CUSTOM_OUTPUT_TOKENS
        ids = (
            counter.fold(counter.ids(text)) if text is not None else counter.length_ids(n_in, seed * 1_000_003 + number)
        )
        if len(ids) + output > max_len:
            too_long += 1
            continue
        out.append(DatasetRequest(text, ids, output))
    if too_long:
        notes.append(f"{too_long:,} rows skipped: longer than max_model_len {max_len:,}")
    return out


def _burstgpt(ref: DatasetRef, path: Path, seed: int, counter: _Counter, max_len: int, num: int | None,
              notes: list[str]) -> list[DatasetRequest]:
    import pandas as pd

    try:
        df = pd.read_csv(io.StringIO(_read_text(path)), nrows=MAX_ROWS)
    except (ValueError, pd.errors.ParserError) as exc:
        raise _bad(path, f"not a CSV file: {str(exc).splitlines()[0]}") from None
    missing = [c for c in ("Model", "Request tokens", "Response tokens") if c not in df.columns]
    if missing:
        raise _bad(
            path, f"BurstGPT's CSV has the columns Model, Request tokens, Response tokens; missing {', '.join(missing)}"
        )
    df = df[(df["Model"] == "GPT-4") & (pd.to_numeric(df["Response tokens"], errors="coerce") > 0)]
    if df.empty:
        raise _bad(path, "no GPT-4 row with a positive Response tokens (vLLM's BurstGPT filter)")
    n = num or len(df)
    rows = df.sample(n=n, random_state=seed, replace=n > len(df))
    out, too_long = [], 0
    for number, (n_in, n_out) in enumerate(zip(rows["Request tokens"], rows["Response tokens"])):
        n_in, n_out = max(1, int(n_in)), int(n_out)
        if n_in + n_out > max_len:
            too_long += 1
            continue
        out.append(DatasetRequest(None, counter.length_ids(n_in, seed * 1_000_003 + number), n_out))
    if too_long:
        notes.append(f"{too_long:,} BurstGPT rows skipped: longer than max_model_len {max_len:,}")
    return out


def load_dataset(
    ref: DatasetRef, *, seed: int, vocab_size: int, max_model_len: int, num_requests: int | None
) -> DatasetStream:
    """The dataset's requests for one run (see the module doc); any problem is one `KvplanError` line."""
    path = Path(ref.path).expanduser()
    if not path.is_file():
        raise KvplanError(f"--dataset-path {ref.path}: no such file (a {ref.name} dataset)")
    notes: list[str] = []
    counter = _Counter(ref.tokenizer, vocab_size)
    if ref.name == "sharegpt":
        kept = _sharegpt(ref, path, seed, counter, max_model_len, num_requests, notes)
    elif ref.name == "custom":
        kept = _custom(ref, path, seed, counter, max_model_len, notes)
    else:
        kept = _burstgpt(ref, path, seed, counter, max_model_len, num_requests, notes)
    if not kept:
        raise _bad(
            path, f"no request left to send (max_model_len {max_model_len:,}){': ' + '; '.join(notes) if notes else ''}"
        )
    if ref.tokenizer is None and any(r.prompt_text is not None for r in kept):
        notes.append("text prompts counted at ~4 bytes a token (no --tokenizer): the server's own counts are in "
                     "server_input_tokens; pass --tokenizer for vLLM's counts")
    if num_requests is not None and num_requests > len(kept):
        notes.append(f"{len(kept):,} requests in {path.name}; {num_requests - len(kept):,} more drawn again at random "
                     "(vLLM's oversampling)")

    rng = random.Random(seed)  # vLLM reseeds its global generator, then random.choices

    def oversample(k: int) -> list[DatasetRequest]:
        return rng.choices(kept, k=k)

    return DatasetStream(kept, oversample, notes)
