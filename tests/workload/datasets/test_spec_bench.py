"""Spec-Bench's question.jsonl as vLLM 0.19.1's SpecBench reads it: the first turn, one category,
random.seed(seed) then random.shuffle, chat-formatted unless skipped, 256 output tokens."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.workload.datasets import load_dataset
from kvplan.workload.datasets.ref import DatasetRef


def test_category_order_and_output(tmp_path: Path) -> None:
    rows = [{"question_id": i, "category": "qa" if i % 2 else "math", "turns": [f"q{i}", "second"]} for i in range(8)]
    path = tmp_path / "question.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ref = DatasetRef(name="spec_bench", path=str(path), category="qa", chat_template=False)
    got = load_dataset(ref, seed=3, vocab_size=32000, max_model_len=4096, num_requests=4).requests
    expected = [f"q{i}" for i in range(8) if i % 2]
    random.seed(3)  # vLLM: random.seed(self.random_seed); random.shuffle(self.data) over the kept rows
    random.shuffle(expected)
    assert [r.prompt_text for r in got] == expected and all(r.output_tokens == 256 for r in got)
    with pytest.raises(KvplanError, match=r"--spec-bench-category 'code': no row of it \(categories: math, qa\)"):
        load_dataset(DatasetRef(name="spec_bench", path=str(path), category="code"), seed=0, vocab_size=32000,
                     max_model_len=4096, num_requests=1)
