"""Parsing of Prometheus text into telemetry samples (no network)."""
from __future__ import annotations

import pytest

from kvplan.stress.telemetry import cache_config, parse_metrics

V1_TWO_ENGINES = """# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 4
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 50
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 40
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="27000",cache_dtype="auto"} 1
"""


def test_v1_engines_sum_and_average() -> None:
    figures, labels = parse_metrics(V1_TWO_ENGINES)
    assert figures == {"kv_cache_usage_perc": 0.375, "num_requests_running": 7.0,
                       "prefix_cache_queries_total": 150.0, "prefix_cache_hits_total": 40.0}
    info = cache_config(labels)
    assert info["num_gpu_blocks"] == 27000 and info["block_size"] == 16 and info["labels"]["cache_dtype"] == "auto"


def test_new_name_wins_over_old() -> None:
    text = ("# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.1\n"
            "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.9\n")
    assert parse_metrics(text)[0] == {"kv_cache_usage_perc": 0.1}


def test_absent_figures_are_absent() -> None:
    figures, labels = parse_metrics("# TYPE other gauge\nother 1\n")
    assert figures == {} and labels is None
    assert cache_config(None) == {"num_gpu_blocks": None, "block_size": None, "labels": {}}


def test_garbage_raises_value_error() -> None:
    with pytest.raises(ValueError):
        parse_metrics("vllm:kv_cache_usage_perc{ not prometheus\n")
