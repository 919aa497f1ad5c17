"""predict --scenario with vLLM's prefix cache: full blocks an earlier prompt had (after the same
blocks) are hits, the last prompt token never is; repeated prompts and shared prefixes hit."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from kvplan.cli import app
from kvplan.perf.random_dataset import prefix_cache_hits


def test_hits_are_whole_blocks_after_the_same_parents() -> None:
    system = tuple(range(100, 148))  # 3 blocks of 16
    a = system + tuple(range(1000, 1020))
    b = system + tuple(range(2000, 2030))
    same = a
    moved = tuple(range(7, 9)) + system  # the same tokens at another offset: other blocks, no hit
    exact = tuple(range(5000, 5032))  # two full blocks, repeated: the last token is always computed
    assert prefix_cache_hits([a, b, same, moved, exact, exact], 16) == [0, 48, 64, 0, 0, 16]


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
