"""`kvplan serve`'s /metrics against vLLM V1's metric families (tests/data/reference/
vllm-v1-metrics.json): same names, types, label names and buckets; every difference is one that
docs/metrics.md lists."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvplan.engine.outputs import RequestOutput
from kvplan.server.prometheus_metrics import CacheConfigInfo, ServerMetrics, buckets_1_2_5

ROOT = Path(__file__).resolve().parents[2]
MAX_MODEL_LEN = 4096
# kvplan's own series (documented in docs/metrics.md): not in vLLM
KVPLAN_ONLY = {"kvplan:kv_cache_bytes_in_use"}


@pytest.fixture(autouse=True, scope="module")
def _no_created_series() -> Iterator[None]:
    """As `kvplan serve` runs (serve.py): no `_created` series, which vLLM's /metrics has none of either."""
    prometheus_client.disable_created_metrics()
    yield
    prometheus_client.enable_created_metrics()


@pytest.fixture(scope="module")
def reference(reference_dir: Path) -> dict:
    return json.loads((reference_dir / "vllm-v1-metrics.json").read_text())


def _served(enable_prefix_caching: bool = True) -> ServerMetrics:
    cache = CacheConfigInfo(
        num_gpu_blocks=128,
        block_size=16,
        cache_dtype="auto",
        enable_prefix_caching=enable_prefix_caching,
        gpu_memory_utilization=0.9,
        kv_cache_memory_bytes=4 * 2**20,
        max_model_len=MAX_MODEL_LEN,
    )
    return ServerMetrics("tiny", cache)


def _families(metrics: ServerMetrics) -> dict:
    return {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}


def _buckets(family) -> list[float]:
    return [float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"]


def _labels(family) -> set[str]:
    return {k for s in family.samples for k in s.labels if k != "le"}


def test_every_vllm_family_with_its_type_labels_and_buckets(reference: dict) -> None:
    families = _families(_served())
    for ref in reference["families"]:
        name = ref["name"].removesuffix("_total") if ref["type"] == "counter" else ref["name"]
        assert name in families, ref["name"]
        fam = families[name]
        assert fam.type == ref["type"], ref["name"]
        assert _labels(fam) == set(ref["labels"]), ref["name"]
        if ref["type"] == "histogram":
            want = buckets_1_2_5(MAX_MODEL_LEN) if ref["buckets"] == "1-2-5 up to max_model_len" else ref["buckets"]
            assert _buckets(fam) == [float(b) for b in want], ref["name"]


def test_nothing_beyond_vllms_but_the_documented(reference: dict) -> None:
    served = set(_families(_served()))
    theirs = {r["name"].removesuffix("_total") if r["type"] == "counter" else r["name"] for r in reference["families"]}
    assert served - theirs == KVPLAN_ONLY
    docs = (ROOT / "docs" / "metrics.md").read_text()
    for name in KVPLAN_ONLY | {"vllm:num_requests_swapped", "vllm:gpu_cache_usage_perc"}:
        assert f"`{name}`" in docs, name


def test_request_success_has_every_finished_reason(reference: dict) -> None:
    fam = _families(_served())["vllm:request_success"]
    assert {s.labels["finished_reason"] for s in fam.samples if s.name.endswith("_total")} == set(
        reference["finished_reasons"]
    )


def _output(finished: bool, times: tuple[float, ...], cached: int = 0) -> RequestOutput:
    return RequestOutput(
        "r1",
        tuple(range(len(times))),
        times,
        40,
        len(times),
        finished,
        "length" if finished else None,
        arrival_time_s=0.0,
        first_scheduled_time_s=0.5,
        num_cached_tokens=cached,
        token_times_s=times if finished else (),
    )


def _value(metrics: ServerMetrics, sample: str, **labels: str) -> float:
    for fam in text_string_to_metric_families(metrics.render().decode()):
        for s in fam.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise KeyError(sample)


def test_request_phases_are_observed_at_the_end() -> None:
    m = _served()
    m.observe_output(_output(False, (1.0,), cached=16))
    m.observe_output(_output(True, (1.0, 1.5, 2.0)))
    assert _value(m, "vllm:request_queue_time_seconds_sum") == pytest.approx(0.5)
    assert _value(m, "vllm:request_prefill_time_seconds_sum") == pytest.approx(0.5)
    assert _value(m, "vllm:request_decode_time_seconds_sum") == pytest.approx(1.0)
    assert _value(m, "vllm:request_inference_time_seconds_sum") == pytest.approx(1.5)
    assert _value(m, "vllm:request_time_per_output_token_seconds_sum") == pytest.approx(0.5)
    assert _value(m, "vllm:prefix_cache_queries_total") == 40 and _value(m, "vllm:prefix_cache_hits_total") == 16


def test_no_prefix_cache_counts_with_caching_off() -> None:
    m = _served(enable_prefix_caching=False)
    m.observe_output(_output(True, (1.0,)))
    assert _value(m, "vllm:prefix_cache_queries_total") == 0 and _value(m, "vllm:prompt_tokens_total") == 40


def test_cache_config_info_carries_the_pool() -> None:
    fam = _families(_served())["vllm:cache_config_info"]
    labels = fam.samples[0].labels
    assert labels["num_gpu_blocks"] == "128" and labels["kv_cache_size_tokens"] == str(128 * 16)
    assert (
        float(labels["kv_cache_max_concurrency"]) == pytest.approx(128 * 16 / MAX_MODEL_LEN) and labels["engine"] == "0"
    )
