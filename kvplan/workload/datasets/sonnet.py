"""sonnet: vLLM's sonnet dataset (vllm/benchmarks/datasets.py SonnetDataset, 0.19.1) from its
text file of poem lines (vLLM ships benchmarks/sonnet.txt). Each prompt is "Pick as many lines as
you can from these poem lines:" and the file's first lines up to `prefix_tokens` (shared by every
prompt), then lines drawn with Python's `random.choices` seeded by --seed, as many as the mean
line length says reach `input_tokens`; a draw whose chat-formatted prompt counts more than
`input_tokens` is drawn again. Counted, as vLLM counts it, with the server's tokenizer and its chat
template (so --tokenizer is required, as vLLM requires one with a chat template). The prompt sent
to /v1/completions is the chat-formatted text; to chat, the bare text (the server formats it)."""
from __future__ import annotations

import random
from pathlib import Path

from kvplan.errors import KvplanError
from kvplan.workload.datasets.ref import DatasetRef
from kvplan.workload.datasets.source import ReadContext, dataset_error, read_dataset_text
from kvplan.workload.request import Request

BASE_PROMPT = "Pick as many lines as you can from these poem lines:\n"
DRAWS_PER_REQUEST = 100  # vLLM redraws without end; kvplan gives up, in one line, after this many


def _formatted(tok: object, text: str) -> str:
    return tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,  # type: ignore[attr-defined]
                                   tokenize=False)


def read(ref: DatasetRef, path: Path, ctx: ReadContext) -> list[Request]:
    tok = ctx.counter.tok
    if tok is None or not getattr(tok, "chat_template", None):
        raise KvplanError("the sonnet dataset counts its prompts with the server's chat template: give --tokenizer "
                          "(a tokenizer with a chat template), as vllm bench serve requires")
    lines = read_dataset_text(path).splitlines(keepends=True)
    if not lines:
        raise dataset_error(path, "no poem lines")
    if ctx.num_requests is None:
        raise KvplanError("the sonnet dataset needs --num-prompts (num_requests), not a duration")
    input_len, prefix_len = ref.input_tokens or 550, ref.prefix_tokens if ref.prefix_tokens is not None else 200
    output_len = ref.output_tokens or 150  # vLLM's defaults: 550 in, 200 prefix, 150 out
    avg_len = sum(ctx.counter.count(line) for line in lines) / len(lines)
    base_offset = ctx.counter.count(_formatted(tok, BASE_PROMPT))
    if input_len <= base_offset:
        raise KvplanError(f"--sonnet-input-len {input_len} must be above the base prompt's {base_offset} tokens")
    if input_len + output_len > ctx.max_model_len:
        raise KvplanError(f"--sonnet-input-len {input_len} + output {output_len} exceed max_model_len "
                          f"{ctx.max_model_len}")
    num_input_lines = round((input_len - base_offset) / avg_len)
    num_prefix_lines = max(round((prefix_len - base_offset) / avg_len), 0)
    prefix = lines[:num_prefix_lines]
    rng = random.Random(ctx.seed)  # vLLM seeds Python's generator with --seed before sampling
    out: list[Request] = []
    for _ in range(DRAWS_PER_REQUEST * ctx.num_requests):
        if len(out) >= ctx.num_requests:
            break
        prompt = BASE_PROMPT + "".join(prefix + rng.choices(lines, k=num_input_lines - num_prefix_lines))
        formatted = _formatted(tok, prompt)
        ids = ctx.counter.ids(formatted)
        if len(ids) <= input_len:
            out.append(Request.of_ids(ctx.counter.fold(ids), output_len, None,
                                      prompt_text=formatted if ref.apply_chat_template else prompt))
    if len(out) < ctx.num_requests:
        raise dataset_error(path, f"no draw of {num_input_lines} lines fits --sonnet-input-len {input_len} in "
                            f"{DRAWS_PER_REQUEST} tries a request")
    return out
