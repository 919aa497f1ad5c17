"""spec_bench: Spec-Bench's question.jsonl (vLLM's SpecBench, a CustomDataset, 0.19.1): the first of
each row's `turns` is the prompt, rows of one `category` only with --spec-bench-category, shuffled
with Python's `random` seeded by --seed (vLLM's order) unless --disable-shuffle, chat-formatted
unless --skip-chat-template, --spec-bench-output-len output tokens (default 256)."""
from __future__ import annotations

import random
from pathlib import Path

from kvplan.workload.datasets.custom import rows
from kvplan.workload.datasets.hf import chat_formatted
from kvplan.workload.datasets.ref import DatasetRef
from kvplan.workload.datasets.source import ReadContext, dataset_error
from kvplan.workload.request import Request

SPEC_BENCH_OUTPUT_TOKENS = 256  # vLLM's --spec-bench-output-len default


def read(ref: DatasetRef, path: Path, ctx: ReadContext) -> list[Request]:
    prompts: list[str] = []
    categories: set[str] = set()
    for number, row in enumerate(rows(path), 1):
        turns = row.get("turns")
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
            raise dataset_error(path, f"row {number}: Spec-Bench rows have `turns`, a list of text")
        categories.add(str(row.get("category")))
        if ref.category is None or row.get("category") == ref.category:
            prompts.append(turns[0])
    if not prompts:
        raise dataset_error(path, f"--spec-bench-category {ref.category!r}: no row of it (categories: "
                            f"{', '.join(sorted(categories))})")
    if ref.shuffle:
        random.Random(ctx.seed).shuffle(prompts)  # vLLM: random.seed(seed); random.shuffle(data)
    output = ref.output_tokens or SPEC_BENCH_OUTPUT_TOKENS
    out: list[Request] = []
    too_long = 0
    for prompt in prompts:
        if ctx.num_requests is not None and len(out) >= ctx.num_requests:
            break
        text = chat_formatted(ctx, [{"role": "user", "content": prompt}]) if ref.chat_template else prompt
        ids = ctx.counter.ids(text)
        if len(ids) + output > ctx.max_model_len:
            too_long += 1
            continue
        out.append(Request.of_ids(ctx.counter.fold(ids), output, None,
                                  prompt_text=text if ref.apply_chat_template else prompt))
    if too_long:
        ctx.notes.append(f"{too_long:,} Spec-Bench rows skipped: longer than max_model_len {ctx.max_model_len:,}")
    return out
