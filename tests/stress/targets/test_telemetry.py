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


@pytest.mark.parametrize("blocks, block_size, expected", [
    ("1e308", "16", (None, 16)),  # once sized a pool of 10^308 blocks: MemoryError after a minute
    ("inf", "16", (None, 16)), ("nan", "16", (None, 16)), ("-5", "16", (None, 16)), ("12.5", "16", (None, 16)),
    (str(2**31 + 1), "16", (None, 16)), ("30000", str(2**21), (30000, None)), ("30000", "16", (30000, 16)),
    ("3e4", "16", (30000, 16)),  # a float spelling of a whole number is that number
])
def test_cache_config_labels_outside_physical_bounds_are_refused(blocks: str, block_size: str,
                                                                 expected: tuple[int | None, int | None]) -> None:
    text = f'vllm:cache_config_info{{block_size="{block_size}",num_gpu_blocks="{blocks}"}} 1\n'
    config = cache_config(parse_metrics(text)[1])
    assert (config["num_gpu_blocks"], config["block_size"]) == expected
    assert config["labels"]["num_gpu_blocks"] == blocks  # the raw text is kept for the note


def test_figures_that_cannot_be_measurements_are_dropped() -> None:
    text = ("vllm:kv_cache_usage_perc 1.5\n" "vllm:num_requests_running NaN\n" "vllm:num_requests_waiting +Inf\n"
            "vllm:num_preemptions_total -3\n" "vllm:prefix_cache_hits_total 7\n")
    figures, _ = parse_metrics(text)
    assert figures == {"prefix_cache_hits_total": 7.0}


def test_a_kv_connectors_counters_are_read_and_the_run_counts_their_rise() -> None:
    """vLLM 0.19.1 exports a connector's lookups as vllm:external_prefix_cache_queries / _hits
    (v1/metrics/loggers.py, counters: `_total` in the text format). A run's hits are what the
    counter rose by between its first and last samples, not the total since the server started."""
    from kvplan.stress.targets.http_target import counter_delta

    text = ("# TYPE vllm:external_prefix_cache_hits counter\n"
            'vllm:external_prefix_cache_hits_total{engine="0",model_name="m"} 4096\n'
            'vllm:external_prefix_cache_queries_total{engine="0",model_name="m"} 9000\n')
    figures, _ = parse_metrics(text)
    assert figures == {"external_prefix_cache_hits_total": 4096.0, "external_prefix_cache_queries_total": 9000.0}
    samples = [{"external_prefix_cache_hits_total": 4096.0}, {}, {"external_prefix_cache_hits_total": 6144.0}]
    assert counter_delta(samples, "external_prefix_cache_hits_total") == 2048
    assert counter_delta(samples, "prefix_cache_hits_total") is None
