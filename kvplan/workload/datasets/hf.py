"""hf: vLLM's Hugging Face text datasets (vllm/benchmarks/datasets.py, 0.19.1), read offline from a
local copy (`hf_files.py`). vLLM picks the dataset class by `--hf-name` (else `--dataset-path`) and
each class makes its prompts its own way; `SCHEMAS` holds each one's rule:

- Aeala/ShareGPT_Vicuna_unfiltered (ConversationDataset): the first turn, the second's length,
  vLLM's length filter when the output is not fixed;
- likaixin/InstructCoder: `input`, a blank line, `instruction` and "Just output the code, ...";
  chat-formatted unless --skip-chat-template; 200 output tokens;
- philschmid/mt-bench: the first of `turns`; chat-formatted unless skipped; 256;
- AI-MO/aimo-validation-aime, AI-MO/NuminaMath-1.5, AI-MO/NuminaMath-CoT: `problem`, the
  `solution`'s length, prompts <= 2,048 and both <= 32,000 tokens when the output is not fixed;
- zed-industries/zeta: the Zeta edit prompt, the length of the output's editable region (always);
- vdaita/edit_5k_char, vdaita/edit_10k_char (Blazedit): the change-request prompt, rows whose
  `norm_distance` is within --blazedit-min/max-distance; chat-formatted unless skipped; 4,000;
- mgoin/mlperf-inference-llama2-data, ...-llama3.1-data: the system prompt and question always
  chat-formatted, the reference `output`'s length (no special tokens), vLLM's length filter.

`--hf-output-len` fixes every output. The rows are shuffled with Python's `random` seeded by --seed
(vLLM shuffles with the datasets library, a different order of the same rows) unless
--disable-shuffle. Image, video and audio datasets are refused by name.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError
from kvplan.workload.datasets.hf_files import read_rows, resolve
from kvplan.workload.datasets.ref import DatasetRef
from kvplan.workload.datasets.source import ReadContext, dataset_error
from kvplan.workload.request import Request

Row = dict[str, Any]
ZETA_PROMPT = """### Instruction:
You are a code completion assistant and your task is to analyze user edits and then rewrite an excerpt that the user provides, suggesting the appropriate edits within the excerpt, taking into account the cursor location.

### User Edits:

{}

### User Excerpt:

{}

### Response:

"""  # noqa: E501 - vLLM's zeta_prompt, verbatim
BLAZEDIT_PROMPT = """Given a code file, please apply the change requests and generate the new file.

Original file:
```python
{}
```

Change request:
{}

Please generate the new code file in the "New file" section below."""  # vLLM's, verbatim
MULTIMODAL = ("lmarena-ai/VisionArena-Chat", "lmarena-ai/vision-arena-bench-v0.1", "yale-nlp/MMVU",
              "lmms-lab/LLaVA-OneVision-Data", "Lin-Chen/MMStar", "openslr/librispeech_asr", "facebook/voxpopuli",
              "LIUM/tedlium", "edinburghcstr/ami", "speechcolab/gigaspeech", "kensho/spgispeech")
VALID = {"min_len": 4, "max_prompt_len": 1024, "max_total_len": 2048}  # vLLM's is_valid_sequence defaults


@dataclass(frozen=True)
class HfSchema:
    """One of vLLM's dataset classes: how a row becomes a prompt and an output length."""

    messages: Callable[[Row], list[dict[str, str]]]
    completion: Callable[[Row], str] | None = None  # its token count is the output when not fixed
    default_output: int | None = None  # vLLM's DEFAULT_OUTPUT_LEN (None: the completion's length)
    template: str = "never"  # never | unless-skipped | always
    valid: dict[str, int] | None = None  # vLLM's length filter when the output comes from the row
    valid_always: bool = False  # the filter also with a fixed output (MLPerf)
    keep: Callable[[Row, DatasetRef], bool] | None = None
    output_always_from_row: bool = False  # zeta ignores --hf-output-len
    special_tokens: bool = True  # the completion counted with the tokenizer's special tokens


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _zeta_region(row: Row) -> str:
    output = str(row["output"])
    return output[output.find("<|editable_region_start|>"):]  # vLLM's slice, -1 (not found) included


SCHEMAS: dict[str, HfSchema] = {
    "Aeala/ShareGPT_Vicuna_unfiltered": HfSchema(
        lambda r: _user(r["conversations"][0]["value"]), lambda r: r["conversations"][1]["value"], valid=VALID,
        keep=lambda r, _: len(r["conversations"]) >= 2),
    "likaixin/InstructCoder": HfSchema(
        lambda r: _user(f"{r['input']}\n\n{r['instruction']} Just output the code, do not include any explanation."),
        default_output=200, template="unless-skipped"),
    "philschmid/mt-bench": HfSchema(lambda r: _user(r["turns"][0]), default_output=256, template="unless-skipped"),
    "zed-industries/zeta": HfSchema(lambda r: _user(ZETA_PROMPT.format(r["events"], r["input"])), _zeta_region,
                                    output_always_from_row=True),
    "mgoin/mlperf-inference-llama2-data": HfSchema(
        lambda r: [{"role": "system", "content": r["system_prompt"]}, {"role": "user", "content": r["question"]}],
        lambda r: r["output"], template="always", valid=VALID, valid_always=True, special_tokens=False),
}
SCHEMAS["mgoin/mlperf-inference-llama3.1-data"] = SCHEMAS["mgoin/mlperf-inference-llama2-data"]
for _name in ("AI-MO/aimo-validation-aime", "AI-MO/NuminaMath-1.5", "AI-MO/NuminaMath-CoT"):
    SCHEMAS[_name] = HfSchema(lambda r: _user(r["problem"]), lambda r: r["solution"],
                              valid={"min_len": 4, "max_prompt_len": 2048, "max_total_len": 32000})
for _name in ("vdaita/edit_5k_char", "vdaita/edit_10k_char"):
    SCHEMAS[_name] = HfSchema(
        lambda r: _user(BLAZEDIT_PROMPT.format(r["code"], r["change_request"])), default_output=4000,
        template="unless-skipped",
        keep=lambda r, ref: ref.min_distance <= float(r["norm_distance"]) <= ref.max_distance)


def schema_for(ref: DatasetRef) -> tuple[str, HfSchema]:
    name = ref.hf_name or ref.path
    if name in MULTIMODAL:
        raise KvplanError(f"--hf-name {name}: an image, video or audio dataset; kvplan sends text prompts only")
    if name not in SCHEMAS:
        raise KvplanError(f"--hf-name {name!r}: name the dataset as vLLM does, one of {', '.join(SCHEMAS)} "
                          "(with a local copy in --dataset-path)")
    return name, SCHEMAS[name]


def chat_formatted(ctx: ReadContext, messages: list[dict[str, str]]) -> str:
    """The messages in the tokenizer's chat template (vLLM's apply_chat_template with a generation
    prompt); the bare text when there is no tokenizer or it has no template (a note says so)."""
    tok = ctx.counter.tok
    if tok is None or not getattr(tok, "chat_template", None):
        return "\n\n".join(m["content"] for m in messages)
    return str(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))


def _is_valid(prompt_len: int, output_len: int, rule: dict[str, int]) -> bool:
    return not (prompt_len < rule["min_len"] or output_len < rule["min_len"] or prompt_len > rule["max_prompt_len"]
                or prompt_len + output_len > rule["max_total_len"])


def _count(ctx: ReadContext, text: str, special_tokens: bool) -> int:
    tok = ctx.counter.tok
    if tok is not None and not special_tokens:
        return len(tok(text, add_special_tokens=False).input_ids)
    return ctx.counter.count(text)


def _sample(ref: DatasetRef, schema: HfSchema, row: Row, ctx: ReadContext) -> tuple[Request | None, str]:
    """The row's request, or None and why it was skipped."""
    if schema.keep is not None and not schema.keep(row, ref):
        return None, "filter"
    messages = schema.messages(row)
    bare = "\n\n".join(m["content"] for m in messages)
    templated = schema.template == "always" or (schema.template == "unless-skipped" and ref.chat_template)
    text = chat_formatted(ctx, messages) if templated else bare
    ids = ctx.counter.ids(text)
    fixed = ref.output_tokens if not schema.output_always_from_row else None
    if fixed is None and schema.default_output is not None:
        fixed = schema.default_output
    output = fixed if fixed is not None else _count(ctx, str(schema.completion(row)), schema.special_tokens)  # type: ignore[misc]
    if schema.valid is not None and (fixed is None or schema.valid_always) and not _is_valid(len(ids), output,
                                                                                            schema.valid):
        return None, "length"
    if output <= 0 or len(ids) + output > ctx.max_model_len:
        return None, "too long"
    return Request.of_ids(ctx.counter.fold(ids), output, None,
                          prompt_text=text if ref.apply_chat_template else bare), ""


def read(ref: DatasetRef, path: Path, ctx: ReadContext) -> list[Request]:
    name, schema = schema_for(ref)
    root = resolve(str(path))
    rows = read_rows(root, ref.hf_subset, ref.hf_split or "train")
    if ref.shuffle:
        random.Random(ctx.seed).shuffle(rows)
        ctx.notes.append(f"{name}: rows shuffled with Python's random (seed {ctx.seed}); vLLM's datasets-library "
                         "shuffle orders the same rows differently (--disable-shuffle keeps the file order in both)")
    out: list[Request] = []
    skipped: dict[str, int] = {}
    for number, row in enumerate(rows, 1):
        if ctx.num_requests is not None and len(out) >= ctx.num_requests:
            break
        try:
            request, why = _sample(ref, schema, row, ctx)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise dataset_error(root, f"row {number} is not a {name} row ({type(exc).__name__}: "
                                f"{str(exc)[:80]})") from None
        if request is None:
            skipped[why] = skipped.get(why, 0) + 1
        else:
            out.append(request)
    words = {"filter": "outside --blazedit-min/max-distance or with fewer than two turns",
             "length": "by vLLM's length filter", "too long": f"longer than max_model_len {ctx.max_model_len:,}"}
    ctx.notes.extend(f"{n:,} {name} rows skipped: {words[why]}" for why, n in skipped.items())
    if schema.template != "never" and (ctx.counter.tok is None or not getattr(ctx.counter.tok, "chat_template", None)) \
            and (schema.template == "always" or ref.chat_template):
        ctx.notes.append(f"{name}: vLLM chat-formats these prompts; without a --tokenizer that has a chat template "
                         "they are counted and sent bare")
    return out
