"""`kvplan predict --sessions`: conversations' prefix-cache figures worked out by hand, and the
issue's bad inputs as one line and exit 2."""
from __future__ import annotations

import json

import pytest

from kvplan.cli import main

BASE = ("predict", "--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--perf-model", "roofline")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main([*BASE, *args])
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_ten_conversations_hit_their_prefix_and_history(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "--sessions", "10", "--turns", "3", "--shared-prefix-tokens", "1000",
                       "--first-turn-tokens", "256", "--turn-tokens", "128", "--reply-tokens", "128", "--json")
    assert rc == 0, err
    figures = json.loads(out)
    # prompts 1256, 1512, 1768 (each turn adds a 128-token reply and a 128-token message)
    assert figures["completed"] == 30
    assert figures["prefix_cache_queries_tokens"] == 10 * (1256 + 1512 + 1768)
    # block size 16. Turn 0: sessions 1-9 hit the prefix's 62 full blocks (992 tokens) session 0
    # registered. Turn 1: 1256 prompt + 127 computed reply tokens = 86 full blocks (1376 tokens);
    # turn 2: 1512 + 127 = 102 blocks (1632). The pool (27,000+ blocks) evicts nothing.
    assert figures["prefix_cache_hits_tokens"] == 9 * 992 + 10 * (1376 + 1632)
    assert figures["prefix_cache_evicted_blocks"] == 0


@pytest.mark.parametrize(("args", "named"), [
    (("--turn-tokens", "1000000000"), "--turn-tokens 1000000000"),
    (("--think-time-s", "-1"), "--think-time-s -1.0"),
    (("--turns", "0"), "--turns 0"),
    (("--think-distribution", "gamma"), "--think-distribution 'gamma'"),
    (("--session-rate", "-3"), "--session-rate"),
])
def test_a_bad_session_knob_is_one_line(capsys: pytest.CaptureFixture[str], args: tuple[str, ...],
                                        named: str) -> None:
    rc, out, err = run(capsys, "--sessions", "4", *args)
    assert rc == 2 and not out
    assert err.count("\n") == 1 and named in err and "Traceback" not in err


def test_sessions_without_prefix_caching_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "--sessions", "4", "--no-enable-prefix-caching")
    assert rc == 2 and "prefix caching" in err and err.count("\n") == 1


def test_a_conversation_longer_than_the_context_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "--sessions", "2", "--turns", "500", "--max-model-len", "4096")
    assert rc == 2 and "max_model_len 4096" in err and err.count("\n") == 1


@pytest.mark.parametrize(("tp", "load_ms"), [("1", 2 * 2**20 / 50.4e9 * 1e3), ("2", 2**20 / 50.4e9 * 1e3)])
def test_a_cpu_tier_is_sized_as_vllm_sizes_it(capsys: pytest.CaptureFixture[str], tp: str, load_ms: float) -> None:
    """vLLM 0.19.1 (config/vllm.py, v1/kv_offload/cpu/spec.py): cpu_bytes_to_use = 8 x 2^30 over
    all ranks; a block there is Llama-3.1-8B's 16 tokens x 32 layers x 2 x 8 KV heads x 128 x 2
    bytes = 2 MiB whatever the TP (1 MiB a GPU x 2 ranks), so 4,096 blocks. A load copies a GPU's
    share over its PCIe 5.0 x16 link: 63 GB/s x 0.8."""
    rc, out, err = run(capsys, "--sessions", "4", "--turns", "2", "--tp", tp, "--kv-offloading-size", "8", "--json")
    assert rc == 0, err
    figures = json.loads(out)
    assert figures["cpu_tier_blocks"] == 4096
    assert figures["cpu_load_ms_per_block"] == pytest.approx(load_ms)
    assert figures["external_prefix_cache_queries_tokens"] > 0


@pytest.mark.parametrize(("args", "named"), [
    (("--kv-offloading-size", "8", "--kv-offloading-backend", "lmcache"), "lmcache"),
    (("--kv-offloading-size", "8", "--kv-offloading-backend", "disk"), "--kv-offloading-backend 'disk'"),
    (("--kv-offloading-size", "-1"), "--kv-offloading-size -1"),
    (("--kv-offloading-size", "1e9"), "--kv-offloading-size 1e+09"),
])
def test_a_bad_cpu_tier_is_one_line(capsys: pytest.CaptureFixture[str], args: tuple[str, ...], named: str) -> None:
    rc, out, err = run(capsys, "--sessions", "2", *args)
    assert rc == 2 and not out and named in err and err.count("\n") == 1, err


def test_conversations_from_a_file_hit_their_history(capsys: pytest.CaptureFixture[str]) -> None:
    """tests/data/conversations/three.json (lengths in tests/workload/test_conversations.py): the
    only later turn (22 tokens) follows a turn that computed 12 prompt + 4 reply tokens: one full
    block of 16 hits."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "data" / "conversations" / "three.json"
    rc, out, err = run(capsys, "--conversations", str(path), "--json")
    assert rc == 0, err
    figures = json.loads(out)
    assert (figures["completed"], figures["prefix_cache_queries_tokens"]) == (4, 12 + 22 + 3 + 2)
    assert figures["prefix_cache_hits_tokens"] == 16


def test_estimate_sizes_the_cpu_tier_beside_the_pool(capsys: pytest.CaptureFixture[str]) -> None:
    """64 GiB over Llama-3.1-8B's 2 MiB blocks (16 tokens): 32,768 blocks, 524,288 tokens."""
    from kvplan.cli import main

    with pytest.raises(SystemExit) as info:
        main(["estimate", "--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--ctx", "8192",
              "--kv-offloading-size", "64", "--json"])
    assert info.value.code in (0, None)
    tier = json.loads(capsys.readouterr().out)["cpu_tier"]
    assert (tier["cpu_tier_blocks"], tier["cpu_tier_tokens"]) == (32768, 524288)
    with pytest.raises(SystemExit) as info:
        main(["estimate", "--model", "llama-3.1-8b-instruct", "--ctx", "8192", "--kv-offloading-size", "64"])
    assert info.value.code == 2 and "needs a GPU" in capsys.readouterr().err


def test_a_cpu_tier_larger_than_the_host_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "--sessions", "2", "--kv-offloading-size", "512", "--host-memory-gib", "256")
    assert rc == 2 and not out and "more than the host's --host-memory-gib 256" in err and err.count("\n") == 1


def test_a_cpu_tier_past_a_usual_host_without_host_memory_is_noted(capsys: pytest.CaptureFixture[str]) -> None:
    """No --host-memory-gib: a tier past a DGX's 256 GiB a GPU (2 TiB for 8) is planned with a note
    naming the flag; at TP 2 the same tier is within the two GPUs' 512 GiB and carries none."""
    rc, out, _ = run(capsys, "--sessions", "2", "--kv-offloading-size", "300", "--json")
    assert rc == 0 and "pass --host-memory-gib" in json.loads(out)["kv_offloading_note"]
    rc, out, _ = run(capsys, "--sessions", "2", "--kv-offloading-size", "300", "--tp", "2", "--json")
    assert rc == 0 and not json.loads(out).get("kv_offloading_note")
