"""Datasets replayed by `kvplan stress` (--dataset-name sharegpt / custom / burstgpt), read as
`vllm bench serve` reads them: filter, seeded order, output lengths, oversampling."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.workload.datasets import load_dataset
from kvplan.workload.datasets.ref import DatasetRef

VOCAB = 32_000


def _words(n: int) -> str:
    return " ".join(f"w{10 + i % 90}" for i in range(n))  # 'wNN ' is 4 bytes: n words ~ n tokens at 4 bytes a token


def _sharegpt(path: Path) -> list[dict]:
    convs = [{"id": f"c{i}", "conversations": [{"from": "human", "value": _words(8 + 7 * i)},
                                               {"from": "gpt", "value": _words(5 + 3 * i)}]} for i in range(40)]
    convs += [
        {"id": "short", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": _words(20)}]},
        {"id": "one-turn", "conversations": [{"from": "human", "value": _words(30)}]},
        {
            "id": "long",
            "conversations": [{"from": "human", "value": _words(1500)}, {"from": "gpt", "value": _words(9)}],
        },
    ]
    path.write_text(json.dumps(convs))
    return convs


def test_sharegpt_order_filter_and_lengths_follow_vllm(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    convs = _sharegpt(path)
    stream = load_dataset(DatasetRef(name="sharegpt", path=str(path)), seed=0, vocab_size=VOCAB, max_model_len=4096,
                          num_requests=10)
    # vLLM: keep >= 2 turns, random.seed(seed); random.shuffle(data); take in order what passes the filter
    expected = [c for c in convs if len(c["conversations"]) >= 2]
    random.seed(0)
    random.shuffle(expected)
    kept = [c for c in expected if c["id"] not in ("short", "long")]  # prompt < 4 tokens, prompt > 1024 tokens
    got = [r.prompt_text for r in stream.take(10)]
    assert got == [c["conversations"][0]["value"] for c in kept[:10]]
    for r, c in zip(stream.requests, kept):
        words = len(c["conversations"][1]["value"].split())
        assert r.output_tokens == words  # the reply's length (4-byte estimate of 'wNN ' words)
        assert all(3 <= t < VOCAB for t in r.prompt_token_ids)
    assert any("~4 bytes a token" in n for n in stream.notes)  # the estimate is named, never silent


def test_sharegpt_fixed_output_len_and_max_model_len(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    _sharegpt(path)
    stream = load_dataset(DatasetRef(name="sharegpt", path=str(path), output_tokens=64), seed=3, vocab_size=VOCAB,
                          max_model_len=200, num_requests=None)
    assert stream.requests and all(r.output_tokens == 64 for r in stream.requests)
    assert all(len(r.prompt_token_ids) + 64 <= 200 for r in stream.requests)
    assert any("longer than max_model_len 200" in n for n in stream.notes)


def test_same_text_same_ids_so_prefix_caching_sees_repeats(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    rows = [{"prompt": "You are a helpful assistant. " * 8 + f"Question {i}?", "output_len": 9} for i in range(3)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    reqs = load_dataset(DatasetRef(name="custom", path=str(path)), seed=0, vocab_size=VOCAB, max_model_len=4096,
                        num_requests=3).requests
    shared = len("You are a helpful assistant. " * 8) // 4
    assert reqs[0].prompt_token_ids[:shared] == reqs[1].prompt_token_ids[:shared] == reqs[2].prompt_token_ids[:shared]
    assert reqs[0].prompt_token_ids != reqs[1].prompt_token_ids
    assert [r.output_tokens for r in reqs] == [9, 9, 9]


def test_custom_rows_of_lengths_jsonl_and_csv_and_oversampling(tmp_path: Path) -> None:
    jsonl = tmp_path / "lens.jsonl"
    jsonl.write_text("\n".join(json.dumps({"input_len": 10 + i, "output_len": 3 + i}) for i in range(5)) + "\n\n")
    csv = tmp_path / "lens.csv"
    csv.write_text("input_len,output_len\n" + "\n".join(f"{10 + i},{3 + i}" for i in range(5)))
    order = list(range(5))
    random.seed(1)  # vLLM's CustomDataset: random.seed(seed); random.shuffle(rows) unless --disable-shuffle
    random.shuffle(order)
    assert order != sorted(order)
    for path in (jsonl, csv):
        stream = load_dataset(DatasetRef(name="custom", path=str(path)), seed=1, vocab_size=VOCAB, max_model_len=4096,
                              num_requests=12)
        reqs = list(stream.take(12))
        assert [(len(r.prompt_token_ids), r.output_tokens) for r in reqs[:5]] == [(10 + i, 3 + i) for i in order]
        kept = load_dataset(DatasetRef(name="custom", path=str(path), shuffle=False), seed=1, vocab_size=VOCAB,
                            max_model_len=4096, num_requests=12).requests
        assert [(len(r.prompt_token_ids), r.output_tokens) for r in kept] == [(10 + i, 3 + i) for i in range(5)]
        assert len(reqs) == 12 and all(r in stream.requests for r in reqs[5:])  # drawn again from the file's rows
        assert all(r.prompt_text is None for r in reqs)
        assert any("drawn again" in n for n in stream.notes)
    default = tmp_path / "p.jsonl"
    default.write_text(json.dumps({"prompt": "hello there"}))
    assert load_dataset(DatasetRef(name="custom", path=str(default)), seed=0, vocab_size=VOCAB, max_model_len=4096,
                        num_requests=1).requests[0].output_tokens == 256  # vLLM's --custom-output-len default


def test_burstgpt_keeps_gpt4_rows_with_a_response(tmp_path: Path) -> None:
    path = tmp_path / "burst.csv"
    rows = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    rows += [f"{i},{'GPT-4' if i % 2 else 'ChatGPT'},{100 + i},{0 if i == 3 else 20 + i},{120 + 2 * i},Conversation log"
             for i in range(12)]
    path.write_text("\n".join(rows))
    stream = load_dataset(DatasetRef(name="burstgpt", path=str(path)), seed=0, vocab_size=VOCAB, max_model_len=4096,
                          num_requests=4)
    kept = {(100 + i, 20 + i) for i in range(12) if i % 2 and i != 3}
    got = [(len(r.prompt_token_ids), r.output_tokens) for r in stream.requests]
    assert len(got) == 4 and set(got) <= kept


@pytest.mark.parametrize(("name", "text", "message"), [
    ("sharegpt", "{", "not ShareGPT JSON"),
    ("sharegpt", '{"a": 1}', "a list of conversations"),
    ("custom", '{"prompt": 5}', "prompt must be text"),
    ("custom", '{"input_len": -4}', "input_len must be a whole number"),
    ("custom", '{"other": 1}', "give `prompt`"),
    ("custom", "[1, 2]", "a JSON line is an object"),
    ("burstgpt", "a,b\n1,2", "missing Model"),
])
def test_bad_files_are_one_line_naming_the_problem(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / ("d.csv" if name == "burstgpt" else "d.jsonl")
    path.write_text(text)
    with pytest.raises(KvplanError, match=message) as info:
        load_dataset(
            DatasetRef(name=name, path=str(path)), seed=0, vocab_size=VOCAB, max_model_len=4096, num_requests=2
        )
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_missing_file_and_nothing_left() -> None:
    with pytest.raises(KvplanError, match="no such file"):
        load_dataset(DatasetRef(name="custom", path="/nonexistent/x.jsonl"), seed=0, vocab_size=VOCAB,
                     max_model_len=4096, num_requests=1)
