"""`/metrics` of `kvplan serve`: a private prometheus_client registry under vLLM's metric names.

Names and label sets follow vLLM V1 (`vllm/v1/metrics/loggers.py`): every series carries
`model_name` and `engine` labels, counters are exposed with `_total`, and `vllm:cache_config_info`
is a constant-1 gauge whose labels carry the cache settings (`num_gpu_blocks`, `block_size`, ...),
so a scraper reads the pool size exactly as it would from vLLM. Series vLLM has no name for are
prefixed `kvplan:`.

Prefix-cache queries and hits are counted in tokens, once per request when its first token is
sampled (prompt tokens and the prompt tokens served from the cache at that admission), so the
hit rate is hits / queries over requests; re-admissions after a preemption are not re-counted.
All updates happen on the engine thread; prometheus_client metrics are thread-safe.
"""
from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kvplan.engine.outputs import EngineStats, RequestOutput

# vLLM's bucket edges (seconds), so dashboards built for vLLM read these histograms unchanged.
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                  20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                 40.0, 80.0)
REQUEST_LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                             120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)


@dataclass(frozen=True)
class CacheConfigInfo:
    """What `vllm:cache_config_info` publishes (label values are strings, as in vLLM)."""

    num_gpu_blocks: int
    block_size: int
    cache_dtype: str
    enable_prefix_caching: bool
    gpu_memory_utilization: float
    kv_cache_memory_bytes: int

    def labels(self) -> dict[str, str]:
        return {"num_gpu_blocks": str(self.num_gpu_blocks), "block_size": str(self.block_size),
                "cache_dtype": self.cache_dtype, "enable_prefix_caching": str(self.enable_prefix_caching),
                "gpu_memory_utilization": str(self.gpu_memory_utilization),
                "kv_cache_memory_bytes": str(self.kv_cache_memory_bytes)}


class ServerMetrics:
    """The registry plus typed handles; `observe_step` and `observe_output` feed it."""

    def __init__(self, model_name: str, cache: CacheConfigInfo, engine_index: str = "0") -> None:
        self.registry = CollectorRegistry()
        names = ["model_name", "engine"]
        values = (model_name, engine_index)
        reg = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, names, registry=reg).labels(*values)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, names, registry=reg).labels(*values)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, names, buckets=buckets, registry=reg).labels(*values)

        self.num_requests_running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.num_requests_waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.num_requests_swapped = gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.")
        self.kv_cache_usage_perc = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.kv_bytes_in_use = gauge("kvplan:kv_cache_bytes_in_use", "KV-cache bytes held by used blocks.")
        self.num_preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prefix_cache_queries = counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_cache_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self.request_success = Counter("vllm:request_success", "Count of successfully processed requests.",
                                       [*names, "finished_reason"], registry=reg)
        for reason in ("stop", "length", "abort"):  # as vLLM: every series exists from the start, at 0
            self.request_success.labels(*values, reason)
        self.ttft_s = histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS_S)
        self.itl_s = histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS_S)
        self.e2e_s = histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                               REQUEST_LATENCY_BUCKETS_S)
        self.queue_s = histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                                 REQUEST_LATENCY_BUCKETS_S)
        self.request_prompt_tokens = histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", TOKEN_BUCKETS)
        self.request_generation_tokens = histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
                                                   TOKEN_BUCKETS)
        info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", list(cache.labels()), registry=reg)
        info.labels(**cache.labels()).set(1)
        self._names = values
        self._last_token_time_s: dict[str, float] = {}  # request id -> when its previous token was sampled

    def observe_step(self, stats: EngineStats) -> None:
        self.num_requests_running.set(stats.num_running)
        self.num_requests_waiting.set(stats.num_waiting)
        self.num_requests_swapped.set(stats.num_swapped)
        self.kv_cache_usage_perc.set(stats.kv_cache_usage)
        self.kv_bytes_in_use.set(stats.kv_bytes_in_use)
        if stats.num_preemptions:
            self.num_preemptions.inc(stats.num_preemptions)

    def observe_output(self, out: RequestOutput) -> None:
        """One request's tokens of one step (called for every output of every step)."""
        n = len(out.new_token_ids)
        if n:
            self.generation_tokens.inc(n)
        previous_s = self._last_token_time_s.get(out.request_id)
        if previous_s is None and out.new_token_times_s:  # first token of this request
            self.ttft_s.observe(max(out.new_token_times_s[0] - out.arrival_time_s, 0.0))
            self.prompt_tokens.inc(out.num_prompt_tokens)
            self.prefix_cache_queries.inc(out.num_prompt_tokens)
            if out.num_cached_tokens:
                self.prefix_cache_hits.inc(out.num_cached_tokens)
            if out.first_scheduled_time_s is not None:
                self.queue_s.observe(max(out.first_scheduled_time_s - out.arrival_time_s, 0.0))
        for t in out.new_token_times_s:
            if previous_s is not None:
                self.itl_s.observe(max(t - previous_s, 0.0))
            previous_s = t
        if previous_s is not None:
            self._last_token_time_s[out.request_id] = previous_s
        if out.finished:
            self._last_token_time_s.pop(out.request_id, None)
            self.request_success.labels(*self._names, out.finish_reason or "length").inc()
            end_s = out.new_token_times_s[-1] if out.new_token_times_s else out.arrival_time_s
            self.e2e_s.observe(max(end_s - out.arrival_time_s, 0.0))
            self.request_prompt_tokens.observe(out.num_prompt_tokens)
            self.request_generation_tokens.observe(out.num_output_tokens)

    def forget(self, request_id: str) -> None:
        """An aborted request: drop its ITL bookkeeping."""
        self._last_token_time_s.pop(request_id, None)

    def render(self) -> bytes:
        return generate_latest(self.registry)
