"""`/metrics` of `kvplan serve`: a private prometheus_client registry under vLLM's V1 metric names.

Names, types, label sets and bucket edges follow vLLM V1's PrometheusStatLogger
(`vllm/v1/metrics/loggers.py`; the list it is checked against is tests/data/reference/
vllm-v1-metrics.json, the differences are in docs/metrics.md): every series carries `model_name`
and `engine` labels, counters are exposed with `_total`, token histograms have 1-2-5 buckets up to
max_model_len, and `vllm:cache_config_info` is a constant-1 gauge whose labels carry the cache
settings (vLLM's CacheConfig field names, plus `engine`), so a scraper reads the pool size exactly
as it would from vLLM. Series vLLM has no name for are prefixed `kvplan:`.

Prefix-cache queries and hits are counted in tokens, once per request when its first token is
sampled, and only with prefix caching on (vLLM keeps no prefix-cache stats without it).
All updates happen on the engine thread, but for the request parameters (observed by the HTTP
handler when it admits a request) and errors; prometheus_client metrics are thread-safe.
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
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
N_BUCKETS = (1, 2, 5, 10, 20)
FINISHED_REASONS = ("stop", "length", "abort", "error")  # vLLM's FinishReason values
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")


def buckets_1_2_5(max_value: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to `max_value` (vLLM's token-count buckets)."""
    out: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_value:
                return tuple(out)
            out.append(mantissa * scale)
        scale *= 10


@dataclass(frozen=True)
class CacheConfigInfo:
    """What `vllm:cache_config_info` publishes (label values are strings, as in vLLM)."""

    num_gpu_blocks: int
    block_size: int
    cache_dtype: str
    enable_prefix_caching: bool
    gpu_memory_utilization: float
    kv_cache_memory_bytes: int
    max_model_len: int = 0  # for kv_cache_max_concurrency (0: unknown)
    sliding_window: int | None = None

    def labels(self) -> dict[str, str]:
        """vLLM's CacheConfig field names (the subset kvplan has a value for) and `engine`."""
        tokens = self.num_gpu_blocks * self.block_size
        concurrency = tokens / self.max_model_len if self.max_model_len else None
        return {
            "block_size": str(self.block_size),
            "gpu_memory_utilization": str(self.gpu_memory_utilization),
            "cache_dtype": self.cache_dtype,
            "is_attention_free": "False",
            "num_gpu_blocks_override": "None",
            "sliding_window": str(self.sliding_window),
            "enable_prefix_caching": str(self.enable_prefix_caching),
            "prefix_caching_hash_algo": "sha256",
            "num_gpu_blocks": str(self.num_gpu_blocks),
            "num_cpu_blocks": "None",
            "kv_cache_size_tokens": str(tokens),
            "kv_cache_max_concurrency": str(concurrency),
            "kv_cache_memory_bytes": str(self.kv_cache_memory_bytes),
            "engine": "0",
        }


class _Unexposed:
    """A gauge vLLM no longer has (`num_requests_swapped`): callers may still set it; it is not served."""

    def set(self, value: float) -> None:
        pass


class ServerMetrics:
    """The registry plus typed handles; `observe_step` and `observe_output` feed it."""

    def __init__(
        self, model_name: str, cache: CacheConfigInfo, engine_index: str = "0", max_model_len: int | None = None
    ) -> None:
        self.registry = CollectorRegistry()
        self._label_names = ["model_name", "engine"]
        self._names = (model_name, engine_index)
        self._prefix_caching = cache.enable_prefix_caching
        self._scheduler_metrics(cache)
        self._counters()
        self._token_histograms(max_model_len or cache.max_model_len or 1)
        self._time_histograms()
        self._last_token_time_s: dict[str, float] = {}  # request id -> when its previous token was sampled

    # --- constructors -----------------------------------------------------------------------------
    def _gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, self._label_names, registry=self.registry).labels(*self._names)

    def _counter(self, name: str, doc: str) -> Counter:
        return Counter(name, doc, self._label_names, registry=self.registry).labels(*self._names)

    def _histogram(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(name, doc, self._label_names, buckets=buckets, registry=self.registry).labels(*self._names)

    def _scheduler_metrics(self, cache: CacheConfigInfo) -> None:
        self.num_requests_running = self._gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.num_requests_waiting = self._gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self.num_requests_swapped = _Unexposed()
        self.kv_cache_usage_perc = self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.kv_bytes_in_use = self._gauge("kvplan:kv_cache_bytes_in_use", "KV-cache bytes held by used blocks.")
        sleep = Gauge("vllm:engine_sleep_state", "Engine sleep state; awake = 1 means engine is awake.",
                      [*self._label_names, "sleep_state"], registry=self.registry)
        for state in SLEEP_STATES:  # kvplan's engine never sleeps
            sleep.labels(*self._names, state).set(1 if state == "awake" else 0)
        info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", list(cache.labels()),
                     registry=self.registry)
        info.labels(**cache.labels()).set(1)

    def _counters(self) -> None:
        c = self._counter
        self.num_preemptions = c("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prefix_cache_queries = c(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        self.prefix_cache_hits = c("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        # no KV connector and no multi-modal input here: these stay at 0, present as in vLLM
        c("vllm:external_prefix_cache_queries", "External prefix cache queries from KV connector cross-instance cache "
                                                "sharing, in terms of number of queried tokens.")
        c("vllm:external_prefix_cache_hits", "External prefix cache hits from KV connector cross-instance cache "
                                             "sharing, in terms of number of cached tokens.")
        c("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.")
        c("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.")
        self.prompt_tokens = c("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = c("vllm:generation_tokens", "Number of generation tokens processed.")
        self.request_success = Counter("vllm:request_success", "Count of successfully processed requests.",
                                       [*self._label_names, "finished_reason"], registry=self.registry)
        for reason in FINISHED_REASONS:  # as vLLM: every series exists from the start, at 0
            self.request_success.labels(*self._names, reason)

    def _token_histograms(self, max_model_len: int) -> None:
        h, tokens = self._histogram, buckets_1_2_5(max_model_len)
        self.request_prompt_tokens = h("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens)
        self.request_generation_tokens = h(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.iteration_tokens = h("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                                  ITERATION_TOKEN_BUCKETS)
        self.max_num_generation_tokens = h("vllm:request_max_num_generation_tokens",
                                           "Histogram of maximum number of requested generation tokens.", tokens)
        self.params_n = h("vllm:request_params_n", "Histogram of the n request parameter.", N_BUCKETS)
        self.params_max_tokens = h(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokens
        )

    def _time_histograms(self) -> None:
        h, lat = self._histogram, REQUEST_LATENCY_BUCKETS_S
        self.ttft_s = h(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS_S
        )
        self.itl_s = h(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS_S
        )
        self.tpot_s = h("vllm:request_time_per_output_token_seconds",
                        "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS_S)
        self.e2e_s = h("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", lat)
        self.queue_s = h(
            "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", lat
        )
        self.inference_s = h(
            "vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", lat
        )
        self.prefill_s = h(
            "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", lat
        )
        self.decode_s = h(
            "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", lat
        )

    # --- updates ----------------------------------------------------------------------------------
    def observe_step(self, stats: EngineStats) -> None:
        self.num_requests_running.set(stats.num_running)
        self.num_requests_waiting.set(stats.num_waiting)
        self.kv_cache_usage_perc.set(stats.kv_cache_usage)
        self.kv_bytes_in_use.set(stats.kv_bytes_in_use)
        if stats.num_preemptions:
            self.num_preemptions.inc(stats.num_preemptions)
        if stats.num_prefill_tokens or stats.num_generated_tokens:
            self.iteration_tokens.observe(stats.num_prefill_tokens + stats.num_generated_tokens)

    def observe_request_params(self, max_tokens: int, n: int = 1) -> None:
        """A request the server admitted (the HTTP handler calls this; vLLM observes them at its end)."""
        self.params_n.observe(n)
        self.params_max_tokens.observe(max_tokens)
        self.max_num_generation_tokens.observe(max_tokens)

    def count_error(self) -> None:
        """A request the engine failed after admitting it (finished_reason="error")."""
        self.request_success.labels(*self._names, "error").inc()

    def _first_token(self, out: RequestOutput) -> None:
        self.ttft_s.observe(max(out.new_token_times_s[0] - out.arrival_time_s, 0.0))
        self.prompt_tokens.inc(out.num_prompt_tokens)
        if self._prefix_caching:
            self.prefix_cache_queries.inc(out.num_prompt_tokens)
            if out.num_cached_tokens:
                self.prefix_cache_hits.inc(out.num_cached_tokens)

    def _finished(self, out: RequestOutput) -> None:
        self._last_token_time_s.pop(out.request_id, None)
        self.request_success.labels(*self._names, out.finish_reason or "length").inc()
        times = out.token_times_s or out.new_token_times_s
        end_s = times[-1] if times else out.arrival_time_s
        self.e2e_s.observe(max(end_s - out.arrival_time_s, 0.0))
        self.request_prompt_tokens.observe(out.num_prompt_tokens)
        self.request_generation_tokens.observe(out.num_output_tokens)
        scheduled_s = out.first_scheduled_time_s if out.first_scheduled_time_s is not None else out.arrival_time_s
        first_s = times[0] if times else end_s
        self.queue_s.observe(max(scheduled_s - out.arrival_time_s, 0.0))
        self.prefill_s.observe(max(first_s - scheduled_s, 0.0))
        self.decode_s.observe(max(end_s - first_s, 0.0))
        self.inference_s.observe(max(end_s - scheduled_s, 0.0))
        n = out.num_output_tokens
        self.tpot_s.observe(max(end_s - first_s, 0.0) / (n - 1) if n > 1 else 0.0)

    def observe_output(self, out: RequestOutput) -> None:
        """One request's tokens of one step (called for every output of every step)."""
        n = len(out.new_token_ids)
        if n:
            self.generation_tokens.inc(n)
        previous_s = self._last_token_time_s.get(out.request_id)
        if previous_s is None and out.new_token_times_s:  # first token of this request
            self._first_token(out)
        for t in out.new_token_times_s:
            if previous_s is not None:
                self.itl_s.observe(max(t - previous_s, 0.0))
            previous_s = t
        if previous_s is not None:
            self._last_token_time_s[out.request_id] = previous_s
        if out.finished:
            self._finished(out)

    def forget(self, request_id: str) -> None:
        """An aborted request (the client went away): finished_reason="abort", its ITL bookkeeping dropped."""
        self._last_token_time_s.pop(request_id, None)
        self.request_success.labels(*self._names, "abort").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
