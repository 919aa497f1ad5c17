"""`kvplan stress --target` against software kvplan did not write: `transformers serve` (it ships
with transformers; its FastAPI extra is in the dev extra) on a tiny local model, offline. That
server takes text prompts only, refuses unknown fields (`ignore_eos`) with 422 and ends streams
without [DONE]: kvplan must probe, send only what it takes, and count prompts with --tokenizer."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from model_dir import build_model_dir
from server_helpers import free_port

from kvplan.cli import main
from kvplan.results.result import load_result
from kvplan.stress.scenario_loader import load_scenario

pytest.importorskip("fastapi", reason="transformers serve needs transformers[serving] (the dev extra)")
pytestmark = pytest.mark.slow
STARTUP_TIMEOUT_S = 240.0  # imports torch and transformers' serving stack on a busy 2-core box
NUM_REQUESTS = 8


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("tiny-chat-model"))


@pytest.fixture(scope="module")
def transformers_server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    exe = Path(sys.executable).with_name("transformers")
    log = (tmp_path_factory.mktemp("tserve") / "log.txt").open("w")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            str(exe),
            "serve",
            str(model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--device",
            "cpu",
            "--log-level",
            "warning",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail(f"transformers serve did not start: {Path(log.name).read_text()[-2000:]}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def _scenario(tmp_path: Path) -> Path:
    data = load_scenario("ci-smoke").to_dict()
    data.update(num_requests=NUM_REQUESTS, warmup_requests=0)  # prompts 32-320 tokens: inside the model's 512
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_every_request_completes_with_the_servers_counts(transformers_server: str, model_dir: Path, tmp_path: Path,
                                                         api: str) -> None:
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        main(["stress", "-s", str(_scenario(tmp_path)), "--target", transformers_server, "--api", api,
              "--tokenizer", str(model_dir), "--out", str(out), "--no-progress", "--timeout-s", "60"])
    assert info.value.code in (0, None)
    result = load_result(out / "result.json")
    records = result.records()
    assert result.verdict == "ok" and len(records) == NUM_REQUESTS
    assert all(r.status == "ok" for r in records), [r.error for r in records if r.error]
    info_ = result.server_info
    assert info_["token_id_prompts"] is False and info_["ignore_eos"] is False  # it takes neither: none sent
    for r in records:  # the server's own prompt count, per request, within 5% of the scenario's
        assert (
            r.server_input_tokens is not None and abs(r.server_input_tokens - r.prompt_tokens) <= 0.05 * r.prompt_tokens
        )
        assert r.server_output_tokens == r.output_tokens
    total = sum(r.prompt_tokens for r in records)
    assert abs(info_["server_input_tokens"] - total) <= 0.05 * total


def test_a_model_the_server_does_not_serve_exits_2(transformers_server: str, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(
            [
                "stress",
                "-s",
                str(_scenario(tmp_path)),
                "--target",
                transformers_server,
                "--served-model-name",
                "no-such",
                "--out",
                str(tmp_path / "run"),
                "--no-progress",
            ]
        )
    _, err = capsys.readouterr()
    assert info.value.code == 2 and err.count("\n") == 1 and "'no-such'" in err
    assert not (tmp_path / "run").exists()


def _dataset_file(kind: str, tmp_path: Path) -> list[str]:
    """A small file of `kind` (as its source publishes it) and the flags that read it."""
    import json

    words = "the kv cache holds keys and values of every token in blocks of sixteen"
    if kind == "sharegpt":
        rows = [{"id": str(i), "conversations": [{"from": "human", "value": f"{words} {i}"},
                                                  {"from": "gpt", "value": f"{words} reply {i}"}]} for i in range(6)]
        path = tmp_path / "sg.json"
        path.write_text(json.dumps(rows))
    elif kind == "custom":
        path = tmp_path / "c.jsonl"
        path.write_text("\n".join(json.dumps({"prompt": f"{words} {i}", "output_len": 6}) for i in range(6)))
    elif kind == "burstgpt":
        path = tmp_path / "b.csv"
        path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                        + "".join(f"{i},GPT-4,{20 + i},{5 + i},{25 + 2 * i},Conversation log\n" for i in range(6)))
    elif kind == "sonnet":
        return ["--dataset-path", str(Path(__file__).resolve().parents[2] / "data" / "datasets" / "sonnet.txt"),
                "--sonnet-input-len", "200", "--sonnet-prefix-len", "60", "--sonnet-output-len", "6"]
    elif kind == "hf":  # a local copy of likaixin/InstructCoder as `hf download --local-dir` leaves it
        path = tmp_path / "instructcoder" / "data" / "train-00000-of-00001.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("".join(json.dumps({"input": f"{words} {i}", "instruction": "fix it"}) + "\n"
                                for i in range(6)))
        return ["--dataset-path", str(tmp_path / "instructcoder"), "--hf-name", "likaixin/InstructCoder",
                "--hf-output-len", "6"]
    elif kind == "spec_bench":
        path = tmp_path / "question.jsonl"
        path.write_text("".join(json.dumps({"question_id": i, "category": "qa", "turns": [f"{words} {i}"]}) + "\n"
                                for i in range(6)))
        return ["--dataset-path", str(path), "--spec-bench-output-len", "6"]
    elif kind == "prefix_repetition":
        return ["--prefix-repetition-num-prefixes", "2", "--prefix-repetition-prefix-len", "40",
                "--prefix-repetition-suffix-len", "20", "--prefix-repetition-output-len", "6"]
    else:  # random
        return ["--random-input-len", "60", "--random-output-len", "6"]
    return ["--dataset-path", str(path)]


@pytest.mark.parametrize("kind", ["random", "sharegpt", "custom", "burstgpt", "sonnet", "hf", "spec_bench",
                                  "prefix_repetition"])
def test_vllm_bench_serve_datasets_run_against_it(transformers_server: str, model_dir: Path, tmp_path: Path,
                                                  kind: str) -> None:
    """Each text dataset kvplan reads, from vllm bench serve's flags alone, against the third-party
    server: every request answered."""
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        main(["stress", "--model", str(model_dir), "--target", transformers_server, "--tokenizer", str(model_dir),
              "--dataset-name", kind, *_dataset_file(kind, tmp_path), "--num-prompts", "4", "--max-concurrency", "2",
              "--out", str(out), "--no-progress", "--timeout-s", "60"])
    assert info.value.code in (0, None)
    records = load_result(out / "result.json").records()
    assert len(records) == 4 and all(r.status == "ok" for r in records), [r.error for r in records]


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_conversations_run_against_it(transformers_server: str, model_dir: Path, tmp_path: Path, api: str) -> None:
    """Later turns resend the history the server streamed; its own prompt counts grow turn by turn."""
    data = yaml.safe_load(_scenario(tmp_path).read_text())
    data.pop("workload", None)
    data["workload"] = {"sessions": {"num_sessions": 2, "turns": 3, "shared_prefix_tokens": 16, "first_turn_tokens": 8,
                                     "turn_tokens": 6, "output_tokens": 4, "think_time_s": 0.0}}
    data.update(num_requests=6, arrival={"type": "concurrency", "concurrency": 2})
    path = tmp_path / "turns.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        main(["stress", "-s", str(path), "--target", transformers_server, "--api", api, "--tokenizer", str(model_dir),
              "--out", str(out), "--no-progress", "--timeout-s", "60"])
    assert info.value.code in (0, None)
    records = load_result(out / "result.json").records()
    assert len(records) == 6 and all(r.status == "ok" for r in records), [r.error for r in records]
    for session in ("session-0", "session-1"):
        counts = [next(r.server_input_tokens for r in records if r.request_id == f"{session}-turn-{t}")
                  for t in range(3)]
        assert counts[0] < counts[1] < counts[2], counts  # each turn carries the one before it and its reply
