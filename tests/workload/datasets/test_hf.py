"""vLLM's Hugging Face text datasets (vllm/benchmarks/datasets.py, 0.19.1) read offline from local
copies laid out as `hf download --repo-type dataset` leaves them. Expected prompts and lengths are
worked by hand from vLLM's classes with the word-level test tokenizer (tests/helpers/model_dir.py:
one token a whitespace word, no BOS; its chat template adds <|role|> and <|end|> around each
message and <|assistant|> after)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from model_dir import build_tokenizer

from kvplan.errors import KvplanError
from kvplan.workload.datasets import load_dataset
from kvplan.workload.datasets.ref import DatasetRef

INSTRUCT_TAIL = " Just output the code, do not include any explanation."  # vLLM's InstructCoder suffix: 9 words


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("tok")
    build_tokenizer(path)
    return str(path)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _load(path: Path, n: int | None, tokenizer: str | None = None, **fields):
    ref = DatasetRef(name="hf", path=str(path), tokenizer=tokenizer, **fields)
    return load_dataset(ref, seed=0, vocab_size=32000, max_model_len=40960, num_requests=n)


def test_instructcoder_prompt_split_and_chat_template(tmp_path: Path, tokenizer: str) -> None:
    root = tmp_path / "ic"
    _jsonl(root / "data" / "train-00000-of-00001.jsonl", [{"input": "w1 w2", "instruction": "w3"}] * 3)
    _jsonl(root / "data" / "test-00000-of-00001.jsonl", [{"input": "w1 w2 w3 w4", "instruction": "w5"}])
    train = _load(root, 3, tokenizer, hf_name="likaixin/InstructCoder", shuffle=False)
    # "w1 w2\n\nw3 Just output ..." = 2 + 1 + 9 words; the template adds <|user|>, <|end|>, <|assistant|>
    assert [len(r.prompt_token_ids) for r in train.requests] == [15] * 3
    assert all(r.output_tokens == 200 for r in train.requests)  # vLLM's DEFAULT_OUTPUT_LEN
    assert train.requests[0].prompt_text == "<|user|> w1 w2\n\nw3" + INSTRUCT_TAIL + " <|end|> <|assistant|> "
    test = _load(root, 1, tokenizer, hf_name="likaixin/InstructCoder", hf_split="test", chat_template=False,
                 output_tokens=7)
    assert test.requests[0].prompt_text == "w1 w2 w3 w4\n\nw5" + INSTRUCT_TAIL  # --skip-chat-template
    assert len(test.requests[0].prompt_token_ids) == 14 and test.requests[0].output_tokens == 7  # --hf-output-len
    with pytest.raises(KvplanError, match=r"--hf-split 'validation': no data file of that split \(splits: test, "
                                          r"train\)"):
        _load(root, 1, tokenizer, hf_name="likaixin/InstructCoder", hf_split="validation")


def test_subset_folders_and_chat_api_sends_bare_text(tmp_path: Path, tokenizer: str) -> None:
    root = tmp_path / "mt"
    _jsonl(root / "a" / "train.jsonl", [{"turns": ["w1 w2 w3", "w9"]}])
    _jsonl(root / "b" / "train.jsonl", [{"turns": ["w4", "w9"]}])
    got = _load(root, 1, tokenizer, hf_name="philschmid/mt-bench", hf_subset="b", apply_chat_template=False)
    request = got.requests[0]
    # counted as vLLM counts it (templated: 1 + 3), sent bare: a chat server applies the template itself
    assert len(request.prompt_token_ids) == 4 and request.prompt_text == "w4" and request.output_tokens == 256
    with pytest.raises(KvplanError, match=r"--hf-subset 'c': no folder of that name \(folders: a, b\)"):
        _load(root, 1, tokenizer, hf_name="philschmid/mt-bench", hf_subset="c")


def test_mlperf_always_templated_and_length_filtered(tmp_path: Path, tokenizer: str) -> None:
    rows = [{"system_prompt": "w1 w2", "question": "w3", "output": "w4 w5 w6 w7"},
            {"system_prompt": "w1", "question": "w3", "output": "w4 w5 w6"}]  # 3 output tokens < vLLM's min 4
    path = _jsonl(tmp_path / "mlperf.jsonl", rows)
    got = _load(path, None, tokenizer, hf_name="mgoin/mlperf-inference-llama2-data", chat_template=False,
                shuffle=False)
    # --skip-chat-template does not apply: "<|system|> w1 w2 <|end|> <|user|> w3 <|end|> <|assistant|>"
    assert [(len(r.prompt_token_ids), r.output_tokens) for r in got.requests] == [(8, 4)]
    assert any("1 mgoin/mlperf-inference-llama2-data rows skipped: by vLLM's length filter" in n for n in got.notes)


def test_aimo_filters_only_lengths_it_reads_from_the_row(tmp_path: Path, tokenizer: str) -> None:
    rows = [{"problem": "w1 w2 w3 w4", "solution": "w5 w6 w7 w8 w9"}, {"problem": "w1 w2", "solution": "w5 w6 w7 w8"}]
    path = _jsonl(tmp_path / "aimo.jsonl", rows)
    dynamic = _load(path, None, tokenizer, hf_name="AI-MO/NuminaMath-CoT", shuffle=False)
    assert [(len(r.prompt_token_ids), r.output_tokens) for r in dynamic.requests] == [(4, 5)]  # 2-token prompt < 4
    fixed = _load(path, None, tokenizer, hf_name="AI-MO/NuminaMath-CoT", shuffle=False, output_tokens=3)
    assert [(len(r.prompt_token_ids), r.output_tokens) for r in fixed.requests] == [(4, 3), (2, 3)]  # no filter


def test_blazedit_distance_window_and_prompt(tmp_path: Path) -> None:
    rows = [{"code": "x = 1", "change_request": f"make it {d}", "norm_distance": d} for d in (0.1, 0.5, 0.9)]
    path = _jsonl(tmp_path / "edit.jsonl", rows)
    got = _load(path, None, None, hf_name="vdaita/edit_5k_char", min_distance=0.2, max_distance=0.6,
                chat_template=False)
    assert len(got.requests) == 1 and got.requests[0].output_tokens == 4000
    assert got.requests[0].prompt_text == (
        "Given a code file, please apply the change requests and generate the new file.\n\nOriginal file:\n"
        "```python\nx = 1\n```\n\nChange request:\nmake it 0.5\n\nPlease generate the new code file in the "
        '"New file" section below.')


def test_zeta_output_is_the_editable_region(tmp_path: Path, tokenizer: str) -> None:
    row = {"events": "e", "input": "i", "output": "w1 w2 <|editable_region_start|> w3 w4 w5"}
    got = _load(_jsonl(tmp_path / "zeta.jsonl", [row]), 1, tokenizer, hf_name="zed-industries/zeta", output_tokens=99)
    assert got.requests[0].output_tokens == 4  # "<|editable_region_start|> w3 w4 w5": --hf-output-len ignored
    assert got.requests[0].prompt_text.startswith("### Instruction:\nYou are a code completion assistant")


def test_a_cached_repo_id_no_oversample_and_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    repo = tmp_path / "hub" / "datasets--philschmid--mt-bench"
    _jsonl(repo / "snapshots" / "abc123" / "data" / "train.jsonl", [{"turns": [f"w{i} w{i}"]} for i in range(3)])
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    got = load_dataset(DatasetRef(name="hf", path="philschmid/mt-bench", oversample=False), seed=0,
                       vocab_size=32000, max_model_len=4096, num_requests=5)
    assert len(list(got.take(5))) == 3 and len(list(got.take(None))) == 3  # --no-oversample: what the file holds
    assert any("not drawn again (--no-oversample)" in n for n in got.notes)
    with pytest.raises(KvplanError, match="not a local folder or file, nor a dataset in the Hugging Face cache"):
        _load(Path("nobody/nothing"), 1, hf_name="philschmid/mt-bench")
    with pytest.raises(KvplanError, match="an image, video or audio dataset"):
        _load(tmp_path, 1, hf_name="lmarena-ai/VisionArena-Chat")
    with pytest.raises(KvplanError, match="name the dataset as vLLM does, one of Aeala/ShareGPT_Vicuna_unfiltered"):
        _load(tmp_path, 1, hf_name="someone/else")
    bad = _jsonl(tmp_path / "bad.jsonl", [{"question": "w1"}])
    with pytest.raises(KvplanError, match="row 1 is not a philschmid/mt-bench row"):
        _load(bad, 1, hf_name="philschmid/mt-bench")


def test_parquet_files(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    import pandas as pd

    (tmp_path / "data").mkdir()
    pd.DataFrame({"turns": [["w1 w2 w3"], ["w4"]]}).to_parquet(tmp_path / "data" / "train-00000-of-00001.parquet")
    got = _load(tmp_path, None, None, hf_name="philschmid/mt-bench", shuffle=False, chat_template=False)
    assert [r.prompt_text for r in got.requests] == ["w1 w2 w3", "w4"]
