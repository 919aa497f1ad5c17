"""The HTTP target: a scenario against any OpenAI-compatible server (`kvplan stress --target`).

The prediction is made from the scenario's own engine settings (pool size from the planner); the
server's `cache_config_info` is then checked against it. Memory is measured from the server's
`/metrics` (KV usage x pool), sampled about twice a second, so its peak is a lower bound of the
true one.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvplan.engine.config import Allocator
from kvplan.results.metrics import max_in_flight
from kvplan.results.result import TimelineSample, collect_environment
from kvplan.stress.redact import redact, without_userinfo
from kvplan.stress.scenario import Scenario
from kvplan.stress.target import Pool, TargetRun
from kvplan.stress.targets.openai_stream import RequestSettings
from kvplan.workload.request import Request


@dataclass(frozen=True)
class HttpOptions:
    url: str
    api: str = "completions"
    served_model_name: str | None = None
    api_key_env: str | None = None
    timeout_s: float = 120.0
    server_kind: str = "auto"  # auto (probe), vllm, sglang, tgi, openai
    tokenizer: str | None = None  # a local tokenizer directory or an HF-cache repo id: exact-length text prompts
    gpu: str | None = None  # the server's GPU (--gpu): the prediction's latency uses kvplan predict's GPU cost model
    request: RequestSettings = field(default_factory=RequestSettings)  # vllm bench serve's per-request flags
    insecure: bool = False  # no TLS certificate check (--insecure)
    ready_check_timeout_s: float = 0.0  # wait for /health first (--ready-check-timeout-sec)
    workers: int = 1  # client processes (--workers): one merged run
    profile: bool = False  # the server's profiler around the run (--profile)


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def _timeline(samples: list[dict[str, Any]], pool_bytes: int | None) -> list[TimelineSample]:
    out = []
    for s in samples:
        usage = s.get("kv_cache_usage_perc")
        out.append(
            TimelineSample(
                t_s=float(s["t_s"]),
                kv_bytes_used=int(round(usage * pool_bytes)) if usage is not None and pool_bytes else None,
                kv_pool_bytes=pool_bytes,
                running=_int(s.get("num_requests_running")),
                waiting=_int(s.get("num_requests_waiting")),
                preemptions=_int(s.get("num_preemptions_total")),
                prefix_hit_tokens=_int(s.get("prefix_cache_hits_total")),
            )
        )
    return out


def counter_delta(samples: list[dict[str, Any]], key: str) -> int | None:
    """What a server counter rose by over the run (first to last sample: the server counts from its
    own start); None when the server does not report it."""
    values = [s[key] for s in samples if s.get(key) is not None]
    return int(values[-1] - values[0]) if values else None


def _feature_notes(info: dict[str, Any], o: HttpOptions) -> list[str]:
    """What was sent, and whether the prompt lengths can be trusted."""
    notes = []
    if info.get("server_kind") is not None:
        kind = info["server_kind"]
        sent = [k for k in ("token_id_prompts", "ignore_eos", "min_tokens") if info.get(k)]
        notes.append(f"server kind {kind}: sent {', '.join(sent) or 'OpenAI fields only'}"
                     + ("" if info.get("ignore_eos") else "; output lengths are the server's (it may stop at EOS)"))
    text_prompts = o.api == "chat" or not info.get("token_id_prompts")
    if text_prompts and o.tokenizer is None:
        notes.append("prompts sent as the words `t<id>` (exact for kvplan serve only): pass --tokenizer with the "
                     "server's tokenizer for prompts of the scenario's length")
    server_in, ours = info.get("server_input_tokens"), info.get("scenario_input_tokens_of_those")
    if server_in is not None and ours:
        notes.append(f"the server counted {server_in:,} prompt tokens where the scenario has {ours:,} "
                     f"({(server_in - ours) / ours:+.1%})")
    return notes


class HttpTarget:
    allocator: Allocator = "paged"  # the server's own; kvplan cannot choose it
    def __init__(self, scenario: Scenario, options: HttpOptions) -> None:
        self.options = options
        self.device_name = options.gpu  # the server's GPU is not visible from the client: --gpu names it
        self.label = f"-> {redact(without_userinfo(options.url))}"  # printed with the progress bar
        self._pool = Pool(scenario.num_gpu_blocks(), scenario.bytes_per_block())
        self._exact_prompts = self._load_prompts()  # a bad --tokenizer fails here, before anything runs

    def pool(self) -> Pool:
        return self._pool

    def _load_prompts(self) -> Any:
        """Exact-length text prompts from --tokenizer (loaded before the run), else None."""
        if self.options.tokenizer is None:
            return None
        from kvplan.stress.targets.prompt_text import ExactPrompts
        from kvplan.workload.datasets.text import load_prompt_tokenizer

        return ExactPrompts(load_prompt_tokenizer(self.options.tokenizer), self.options.api)

    def run(self, scenario: Scenario, requests: list[Request], on_progress: Callable[[int], None]) -> TargetRun:
        from kvplan.stress.targets.openai_http import api_key, run_http

        o = self.options
        shared = dict(url=o.url, api=o.api, served_model_name=o.served_model_name, api_key_env=o.api_key_env,
                      timeout_s=o.timeout_s, concurrency=scenario.arrival.in_flight_cap,
                      warmup_request_ids=frozenset(r.request_id for r in requests if r.is_warmup),
                      server_kind=o.server_kind, settings=o.request, insecure=o.insecure,
                      ready_check_timeout_s=o.ready_check_timeout_s)
        if o.workers > 1:
            from kvplan.stress.targets.workers import run_http_workers

            out = run_http_workers(requests, o.workers, on_progress, tokenizer=o.tokenizer, **shared)
        else:
            out = run_http(requests, on_progress=on_progress, prompts=self._exact_prompts, profile=o.profile, **shared)
        info = {**out.server_info, "tokenizer": o.tokenizer}  # already masked by run_http
        url = info.get("url") or without_userinfo(o.url)
        notes = [
            f"target: {url} ({o.api} API); memory from /metrics (sampled; peak is a lower bound)",
            *_feature_notes(info, o), *info.get("profile", ()),
        ]
        blocks, server_blocks = self._pool.num_gpu_blocks, info.get("num_gpu_blocks")
        if blocks is not None and server_blocks is not None and int(server_blocks) != blocks:
            notes.append(f"the server's pool has {server_blocks} blocks; the scenario's settings give {blocks}")
        # measured means told by the server: without its cache_config_info the pool is not measured,
        # and the scenario's own figures are never passed off as measurements
        pool_blocks = int(server_blocks) if server_blocks is not None else None
        per_block = self._pool.bytes_per_block if pool_blocks is not None else None
        pool_bytes = pool_blocks * per_block if pool_blocks is not None and per_block else None
        raw_blocks = (info.get("cache_config") or {}).get("num_gpu_blocks")
        if pool_blocks is None and raw_blocks not in (None, "", "None"):
            notes.append(f"the server's num_gpu_blocks label {str(raw_blocks)[:40]!r} is not a block count: "
                         "ignored, memory not measured")
        elif pool_blocks is None:
            notes.append("the server reports no KV pool (no vllm:cache_config_info in /metrics): memory not measured")
        timeline = _timeline(out.telemetry, pool_bytes)
        memory = {
            "num_gpu_blocks": pool_blocks, "kv_pool_bytes": pool_bytes, "bytes_per_block": per_block,
            "peak_kv_bytes": max((s.kv_bytes_used for s in timeline if s.kv_bytes_used is not None), default=None),
            "peak_running_requests": max((s.running or 0 for s in timeline), default=None),
            "num_preemptions": timeline[-1].preemptions if timeline else None,
            "prefix_hit_tokens": counter_delta(out.telemetry, "prefix_cache_hits_total"),
            "external_prefix_hit_tokens": counter_delta(out.telemetry, "external_prefix_cache_hits_total"),
            "max_concurrent_requests": max_in_flight(out.records),
            "token_mismatches": len(out.token_mismatches), "errors_by_kind": dict(out.errors),
        }
        if out.token_mismatches:
            notes.append(f"{len(out.token_mismatches)} token counts differ from the scenario's by more than 2%: "
                         + "; ".join(out.token_mismatches[:5]))
        # a --header may carry a credential: long values are masked like the key (short ones, "1", are not)
        secrets = (api_key(o.api_key_env), *(v for v in o.request.headers.values() if len(v) >= 8))
        notes = [redact(note, secrets) for note in notes]  # they quote the server's figures
        return TargetRun(records=out.records, timeline=timeline, memory=memory, environment=collect_environment(),
                         complete=out.complete, notes=notes, server_telemetry=list(out.telemetry), server_info=info)
