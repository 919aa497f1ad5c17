"""predict --scenario with vLLM's prefix cache: full blocks an earlier prompt had (after the same
blocks) are hits, the last prompt token never is; repeated prompts and shared prefixes hit."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from kvplan.cli import app
from kvplan.workload.prefix_cache import prefix_cache_hits


def test_hits_are_whole_blocks_after_the_same_parents() -> None:
    system = tuple(range(100, 148))  # 3 blocks of 16
    a = system + tuple(range(1000, 1020))
    b = system + tuple(range(2000, 2030))
    same = a
    moved = tuple(range(7, 9)) + system  # the same tokens at another offset: other blocks, no hit
    exact = tuple(range(5000, 5032))  # two full blocks, repeated: the last token is always computed
    assert prefix_cache_hits([a, b, same, moved, exact, exact], 16) == [0, 48, 64, 0, 0, 16]


def test_a_block_hits_only_after_the_same_parents() -> None:
    """vLLM hashes a block with its parent's hash: block Y after X is not block Y at the start, so a
    prompt starting with another prompt's second block finds nothing cached."""
    x, y, z = tuple(range(100, 116)), tuple(range(200, 216)), tuple(range(300, 317))
    assert prefix_cache_hits([x + y + (1,), y + z], 16) == [0, 0]
    assert prefix_cache_hits([x + y + (1,), x + z], 16) == [0, 16]


def test_predict_scenario_with_shared_prefixes_hits_the_cache() -> None:
    def ttft(flag: str) -> float:
        r = CliRunner().invoke(
            app, ["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--scenario", "shared-prefix", flag, "--json"]
        )
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["mean_ttft_ms"]

    assert ttft("--enable-prefix-caching") < 0.9 * ttft(
        "--no-enable-prefix-caching"
    )  # 512/1024-token prefixes served from cache


def test_cached_tokens_follow_arrival_order_not_stream_order() -> None:
    from kvplan.workload.prefix_cache import with_cached_tokens
    from kvplan.workload.request import Request

    prompt = tuple(range(100, 140))  # 2 full blocks of 16 and 8 tokens
    late = Request.of_ids(prompt, 1, 5.0)
    early = Request.of_ids(prompt, 1, 1.0)
    # the one sent first (arrival 1.0) finds nothing; the later one finds the two full blocks
    assert [r.cached_tokens for r in with_cached_tokens([late, early], 16)] == [32, 0]


def test_as_sent_drops_warm_up_after_it_filled_the_cache() -> None:
    from kvplan.workload.request import Request
    from kvplan.workload.workload import as_sent

    prompt = tuple(range(100, 133))  # 2 full blocks + 1 token
    warm = Request.of_ids(prompt, 1, None, is_warmup=True)
    timed = Request.of_ids(prompt, 1, None)
    sent = as_sent([warm, timed], 16)
    assert [(r.arrival_s, r.cached_tokens) for r in sent] == [(0.0, 32)]
    assert as_sent([warm, timed], 16, prefix_caching=False)[0].cached_tokens == 0


def test_hit_rate_is_whole_blocks_and_never_the_last_token() -> None:
    from kvplan.workload.prefix_cache import with_hit_rate
    from kvplan.workload.request import Request

    # 100 tokens x 0.5 = 50 -> 48 (3 blocks of 16); 33 tokens x 1.0 -> 32 (the last token computed)
    got = with_hit_rate([Request(0.0, 100, 1), Request(0.0, 33, 1)], 0.5, 16)
    assert [r.cached_tokens for r in got] == [48, 16]
    assert with_hit_rate([Request(0.0, 33, 1)], 1.0, 16)[0].cached_tokens == 32
