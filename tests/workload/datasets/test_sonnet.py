"""The sonnet dataset as vLLM 0.19.1 builds it (vllm/benchmarks/datasets.py SonnetDataset), from
the file vLLM ships (tests/data/datasets/sonnet.txt), counted with a tokenizer that has a chat
template (tests/helpers/model_dir.py's word-level one: one token a word)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from model_dir import build_tokenizer

from kvplan.errors import KvplanError
from kvplan.workload.datasets import load_dataset
from kvplan.workload.datasets.ref import DatasetRef
from kvplan.workload.datasets.sonnet import BASE_PROMPT

SONNET = Path(__file__).resolve().parents[2] / "data" / "datasets" / "sonnet.txt"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("tok")
    build_tokenizer(path)
    return str(path)


def _load(tokenizer: str | None, n: int = 8, **fields) -> list:
    ref = DatasetRef(name="sonnet", path=str(SONNET), tokenizer=tokenizer, **fields)
    return list(load_dataset(ref, seed=0, vocab_size=32000, max_model_len=4096, num_requests=n).take(n))


def test_prompts_as_vllm_draws_them(tokenizer: str) -> None:
    """vLLM's rule, redone here from the file: line counts from the mean line length and the base
    prompt's formatted length; the prefix is the file's first lines; the rest drawn with
    random.Random(seed).choices; a draw counting more than input_len is redrawn."""
    from kvplan.workload.datasets.text import load_prompt_tokenizer

    tok = load_prompt_tokenizer(tokenizer)
    lines = SONNET.read_text().splitlines(keepends=True)

    def count(text: str) -> int:
        return len(tok(text).input_ids)

    def fmt(text: str) -> str:
        return tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)

    input_len, prefix_len = 300, 100
    avg = sum(count(line) for line in lines) / len(lines)
    offset = count(fmt(BASE_PROMPT))
    n_in, n_prefix = round((input_len - offset) / avg), max(round((prefix_len - offset) / avg), 0)
    rng, expected = random.Random(0), []
    while len(expected) < 5:
        prompt = BASE_PROMPT + "".join(lines[:n_prefix] + rng.choices(lines, k=n_in - n_prefix))
        if count(fmt(prompt)) <= input_len:
            expected.append(fmt(prompt))
    got = _load(tokenizer, 5, input_tokens=input_len, prefix_tokens=prefix_len, output_tokens=20)
    assert [r.prompt_text for r in got] == expected
    assert all(r.prompt_tokens == count(t) <= input_len and r.output_tokens == 20 for r, t in zip(got, expected))
    # every prompt starts with the same prefix lines: shared prefix-cache blocks, as in vLLM's runs
    assert len({r.prompt_text[:200] for r in got}) == 1


def test_chat_runs_send_the_bare_text(tokenizer: str) -> None:
    got = _load(tokenizer, 2, apply_chat_template=False)
    assert all(r.prompt_text.startswith(BASE_PROMPT) for r in got)


def test_without_a_chat_tokenizer_is_one_line() -> None:
    with pytest.raises(KvplanError, match="needs|--tokenizer"):
        _load(None)
