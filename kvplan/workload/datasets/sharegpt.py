"""ShareGPT: a JSON list of `{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}, ...]}`.

As vLLM's ShareGPTDataset: entries with fewer than two turns are dropped, the list is shuffled with
Python's `random` seeded by the run's seed, the first turn is the prompt and the second's token count
the output length (or `output_tokens`, vLLM's `--sharegpt-output-len`), and a pair is kept only if the
prompt has 4..1024 tokens, the output at least 4 (unless fixed) and both together at most 2048.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from kvplan.workload.datasets.ref import DatasetRef
from kvplan.workload.datasets.source import MAX_ROWS, ReadContext, dataset_error, read_dataset_text
from kvplan.workload.request import Request

MIN_TOKENS, MAX_PROMPT_TOKENS, MAX_TOTAL_TOKENS = 4, 1024, 2048  # vLLM's is_valid_sequence


def read(ref: DatasetRef, path: Path, ctx: ReadContext) -> list[Request]:
    try:
        data = json.loads(read_dataset_text(path))
    except json.JSONDecodeError as exc:
        raise dataset_error(path, f"not ShareGPT JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(data, list):
        raise dataset_error(path, f"ShareGPT JSON is a list of conversations, got a {type(data).__name__}")
    data = [e for e in data[:MAX_ROWS] if isinstance(e, dict) and isinstance(e.get("conversations"), list)
            and len(e["conversations"]) >= 2]
    if ref.shuffle:  # vLLM shuffles unless --disable-shuffle
        random.Random(ctx.seed).shuffle(data)  # vLLM: random.seed(seed); random.shuffle(data): the same order
    out: list[Request] = []
    skipped = too_long = 0
    for entry in data:
        if ctx.num_requests is not None and len(out) >= ctx.num_requests:
            break
        turns = entry["conversations"]
        prompt, completion = (t.get("value") if isinstance(t, dict) else None for t in turns[:2])
        if not isinstance(prompt, str) or not isinstance(completion, str):
            skipped += 1
            continue
        ids = ctx.counter.ids(prompt)
        output = ref.output_tokens if ref.output_tokens is not None else ctx.counter.count(completion)
        if (len(ids) < MIN_TOKENS or (ref.output_tokens is None and output < MIN_TOKENS)
                or len(ids) > MAX_PROMPT_TOKENS or len(ids) + output > MAX_TOTAL_TOKENS):
            skipped += 1
            continue
        if len(ids) + output > ctx.max_model_len:
            too_long += 1
            continue
        out.append(Request.of_ids(ctx.counter.fold(ids), output, None, prompt_text=prompt))
    if skipped:
        ctx.notes.append(f"{skipped:,} ShareGPT conversations skipped by vLLM's length filter (prompt 4..1024 "
                         "tokens, output >= 4, together <= 2048) or for lacking text")
    if too_long:
        ctx.notes.append(
            f"{too_long:,} ShareGPT conversations skipped: longer than max_model_len {ctx.max_model_len:,}"
        )
    return out
