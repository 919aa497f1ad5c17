"""`DatasetRef`: a file of real requests to replay, named as `vllm bench serve --dataset-name`
names them (one module each in this package reads them)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from kvplan.validation import StrictModel
from kvplan.workload.limits import MAX_TOKENS

DATASET_NAMES = ("sharegpt", "custom", "burstgpt", "sonnet")


class DatasetRef(StrictModel):
    """sharegpt (ShareGPT JSON: the first human turn is the prompt, the reply's length the output),
    custom (JSONL or CSV rows with `prompt` text or `input_len`, and optionally `output_len`),
    burstgpt (BurstGPT's CSV of request and response token counts), sonnet (vLLM's poem-lines file)."""

    name: Literal["sharegpt", "custom", "burstgpt", "sonnet"]
    path: str = Field(min_length=1, max_length=4096)  # relative paths: from the scenario file's folder
    output_tokens: int | None = Field(default=None, gt=0, le=MAX_TOKENS)  # --sharegpt-output-len / --custom-output-len
    # counts text prompts (else ~4 bytes a token)
    tokenizer: str | None = Field(default=None, min_length=1, max_length=4096)
    # sonnet: --sonnet-input-len and --sonnet-prefix-len (vLLM's 550 and 200), and whether the sent
    # text is chat-formatted (completions) or bare (chat: the server applies the template)
    input_tokens: int | None = Field(default=None, gt=0, le=MAX_TOKENS)
    prefix_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    apply_chat_template: bool = True
