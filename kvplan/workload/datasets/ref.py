"""`DatasetRef`: a file of real requests to replay, named as `vllm bench serve --dataset-name`
names them (one module each in this package reads them)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from kvplan.validation import StrictModel
from kvplan.workload.limits import MAX_TOKENS

DATASET_NAMES = ("sharegpt", "custom", "burstgpt", "sonnet", "hf", "spec_bench")


class DatasetRef(StrictModel):
    """sharegpt (ShareGPT JSON: the first human turn is the prompt, the reply's length the output),
    custom (JSONL or CSV rows with `prompt` text or `input_len`, and optionally `output_len`),
    burstgpt (BurstGPT's CSV of request and response token counts), sonnet (vLLM's poem-lines file),
    hf (one of vLLM's Hugging Face text datasets: a local folder or file, or a repo id already in the
    Hugging Face cache), spec_bench (Spec-Bench's question.jsonl)."""

    name: Literal["sharegpt", "custom", "burstgpt", "sonnet", "hf", "spec_bench"]
    # a file; hf: a folder, a file or a repo id (relative paths: from the scenario file's folder)
    path: str = Field(min_length=1, max_length=4096)
    output_tokens: int | None = Field(default=None, gt=0, le=MAX_TOKENS)  # --sharegpt-output-len / --custom-output-len
    # counts text prompts (else ~4 bytes a token)
    tokenizer: str | None = Field(default=None, min_length=1, max_length=4096)
    # sonnet: --sonnet-input-len and --sonnet-prefix-len (vLLM's 550 and 200), and whether the sent
    # text is chat-formatted (completions) or bare (chat: the server applies the template)
    input_tokens: int | None = Field(default=None, gt=0, le=MAX_TOKENS)
    prefix_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    apply_chat_template: bool = True
    # vLLM's --skip-chat-template off: prompts of the datasets vLLM chat-formats are counted (and on
    # /v1/completions sent) in the tokenizer's chat template
    chat_template: bool = True
    shuffle: bool = True  # vLLM shuffles (seeded) unless --disable-shuffle
    oversample: bool = True  # fewer rows than requests: drawn again, unless vLLM's --no-oversample
    # hf: which of vLLM's dataset classes reads the rows (--hf-name, else `path` as a repo id), the
    # config and split (--hf-subset, --hf-split), and Blazedit's edit-distance window
    hf_name: str | None = Field(default=None, min_length=1, max_length=200)
    hf_subset: str | None = Field(default=None, min_length=1, max_length=200)
    hf_split: str | None = Field(default=None, min_length=1, max_length=200)
    min_distance: float = Field(default=0.0, ge=0.0, le=1.0)
    max_distance: float = Field(default=1.0, ge=0.0, le=1.0)
    category: str | None = Field(default=None, min_length=1, max_length=200)  # spec_bench: --spec-bench-category
