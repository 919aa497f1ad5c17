"""`--kv-cache-memory-bytes` plans without a GPU (vLLM sizes the pool from the bytes and ignores the
device's size), and `--vllm-version` takes version strings as pip writes them."""
from __future__ import annotations

import json

import pytest

from kvplan.cli import main
from kvplan.errors import KvplanError
from kvplan.plan.kv import KvLayout
from kvplan.plan.overheads import parse_vllm_version
from kvplan.spec.profiles import load_model


def _run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_kv_cache_memory_bytes_without_a_gpu_plans_the_pool(capsys):
    budget = 10 * 2**30
    rc, out, err = _run(
        capsys, "estimate", "--model", "qwen3-8b", "--ctx", "4096", "--kv-cache-memory-bytes", str(budget), "--json"
    )
    assert rc == 0, err
    data = json.loads(out)
    block = KvLayout.of(load_model("qwen3-8b")).bytes_per_block()
    assert data["gpu"] is None and data["gpu_memory_bytes"] is None
    assert data["available_kv_cache_bytes"] == budget
    assert data["num_gpu_blocks"] == budget // block  # the bytes alone decide the pool
    assert data["max_concurrency_at_ctx"] == budget // data["kv_bytes_per_request_per_gpu"]


def test_kv_cache_memory_bytes_gives_the_same_pool_with_or_without_a_gpu(capsys):
    args = ("estimate", "--model", "qwen3-8b", "--ctx", "8192", "--kv-cache-memory-bytes", str(7 * 2**30), "--json")
    _, alone, _ = _run(capsys, *args)
    _, on_gpu, _ = _run(capsys, *args, "--gpu", "h100")
    assert json.loads(alone)["num_gpu_blocks"] == json.loads(on_gpu)["num_gpu_blocks"]


def test_other_engine_flags_still_need_a_gpu(capsys):
    rc, _, err = _run(capsys, "estimate", "--model", "qwen3-8b", "--max-num-seqs", "8")
    assert (
        rc == 2 and err.startswith("kvplan: error: --max-num-seqs needs a GPU") and len(err.strip().splitlines()) == 1
    )


@pytest.mark.parametrize(("text", "version"), [("0.6.4.post1", (0, 6, 4)), ("0.10.1rc1", (0, 10, 1)),
                                               ("0.11.0+cu128", (0, 11, 0)), ("v0.9.2", (0, 9, 2)),
                                               ("0.8.5.dev12+g1234abc", (0, 8, 5)), ("0.19", (0, 19, 0))])
def test_pip_version_strings(capsys, text, version):
    assert parse_vllm_version(text) == version
    rc, out, err = _run(capsys, "estimate", "--model", "qwen3-8b", "--gpu", "h100", "--vllm-version", text, "--json")
    assert rc == 0, err
    assert json.loads(out)["vllm_version"] == ".".join(map(str, version))


@pytest.mark.parametrize("text", ["latest", "nineteen", "0.x"])
def test_bad_version_is_one_line(capsys, text):
    with pytest.raises(KvplanError):
        parse_vllm_version(text)
    rc, _, err = _run(capsys, "estimate", "--model", "qwen3-8b", "--gpu", "h100", "--vllm-version", text)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and text in err
