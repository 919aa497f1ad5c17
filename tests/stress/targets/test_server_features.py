"""What a run sends to a server: probed with one-token requests (`--server-kind auto`) or named."""
from __future__ import annotations

import asyncio

import pytest

from kvplan.errors import KvplanError
from kvplan.stress.targets.server_features import KNOWN_KINDS, check_server_kind, probe_features


def _server(accepts: set[str], token_ids: bool = True, status: int = 422):
    """A fake server: 200 unless the body holds a field it refuses (or a token-id prompt it cannot take)."""
    seen: list[dict] = []

    async def post(body: dict) -> tuple[int, str]:
        seen.append(body)
        extra = set(body) - {"model", "prompt", "messages", "max_tokens", "temperature"}
        if extra - accepts:
            return status, f"Unexpected fields in the request: {sorted(extra - accepts)}"
        if isinstance(body.get("prompt"), list) and not token_ids:
            return 400, "prompt must be a string."
        return 200, "{}"

    return post, seen


@pytest.mark.parametrize("accepts, token_ids, want", [
    ({"ignore_eos", "min_tokens"}, True, (True, True, True)),  # vLLM
    ({"ignore_eos"}, True, (True, True, False)),
    (set(), False, (False, False, False)),  # transformers serve
])
def test_probe_finds_what_the_server_takes(accepts: set[str], token_ids: bool, want: tuple) -> None:
    post, seen = _server(accepts, token_ids)
    got = asyncio.run(probe_features(post, "completions", "m", str))
    assert (got.token_id_prompts, got.ignore_eos, got.min_tokens) == want
    assert all(body["max_tokens"] == 1 for body in seen)  # one-token probes only
    assert got.extras(7) == ({"ignore_eos": True} if want[1] else {}) | ({"min_tokens": 7} if want[2] else {})


def test_a_refused_probe_is_one_line_and_a_failing_server_is_not() -> None:
    async def refuse(body: dict) -> tuple[int, str]:
        return 404, "The model `x` does not exist."

    with pytest.raises(KvplanError, match="HTTP 404.*does not exist"):
        asyncio.run(probe_features(refuse, "chat", "x", str))

    async def fail(body: dict) -> tuple[int, str]:
        return 500, "engine dead"

    got = asyncio.run(probe_features(fail, "completions", "x", str))
    assert not (got.token_id_prompts or got.ignore_eos or got.min_tokens)


def test_named_kinds_and_bad_names() -> None:
    assert KNOWN_KINDS["vllm"].extras(5) == {"ignore_eos": True, "min_tokens": 5}
    assert KNOWN_KINDS["tgi"].extras(5) == {}
    with pytest.raises(KvplanError, match="--server-kind 'llamacpp'.*auto, vllm, sglang, tgi, openai"):
        check_server_kind("llamacpp")


@pytest.mark.parametrize("args, words", [
    (["--target", "http://127.0.0.1:9", "--server-kind", "llamacpp"], "--server-kind 'llamacpp'"),
    (["--tokenizer", "/nowhere"], "--tokenizer applies to a --target server or to a dataset"),
    (["--format", "csv"], "--format 'csv': choose one of kvplan, vllm"),
])
def test_bad_flags_are_one_line_before_anything_runs(args: list[str], words: str, tmp_path, capsys) -> None:
    from kvplan.cli import main

    with pytest.raises(SystemExit) as info:
        main(["stress", "-s", "ci-smoke", "--out", str(tmp_path / "o"), "--no-progress", *args])
    _, err = capsys.readouterr()
    assert info.value.code == 2 and err.count("\n") == 1 and words in err
    assert not (tmp_path / "o").exists()
