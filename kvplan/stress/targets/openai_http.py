"""The HTTP target: drive any OpenAI-compatible server (vLLM, SGLang, TGI, `kvplan serve`) with a
scenario's requests over streaming SSE, and scrape its `/metrics` meanwhile.

Timing: one clock, `time.perf_counter()` minus the run start, for records and telemetry alike. A
request's `arrival_s` is when it was sent; each SSE event carrying text is stamped when the bytes
holding it were read off the socket (`token_times_s`, one entry per text chunk: vLLM's benchmark
takes chunk gaps as ITL too; servers that pack several tokens into one chunk give fewer entries).
`output_tokens` is the server's `usage.completion_tokens` when it reports usage, else the chunk
count; any request whose count differs from the one asked for is listed in `token_mismatches`.

Transport: the streamed requests go through `http1` (a minimal keep-alive HTTP/1.1 client whose
per-chunk cost is a callback, ~8 us of CPU against httpx's ~38 us), so one process follows
hundreds of streams without its own queueing showing up as latency; httpx does the probe and the
`/metrics` scrapes. Closed loop opens its `concurrency` connections before the clock starts (each
simulated user holds one), so the first wave's TTFT does not include N simultaneous handshakes;
open loop opens them as arrivals need them, and such a connect counts in that request's TTFT.

Prompts: `/v1/completions` gets the token ids themselves (`prompt: [ids]`) where the server takes
them (vLLM, SGLang; `server_features.py` probes or takes `--server-kind`). Chat, and servers
without token-id prompts, get text: `prompts` (prompt_text.ExactPrompts, from `--tokenizer`) of
exactly the scenario's length in the server's own count, else the word form `t<id> t<id> ...`
that `kvplan serve` maps back to exactly those ids (other servers see ~2-3 tokens a word).
`ignore_eos` / `min_tokens` go only to servers that take them. Each record keeps the server's own
`usage` counts (`server_input_tokens`, `server_output_tokens`); requests whose counts differ from
the scenario's by more than 2% are listed in `token_mismatches`.

Failures never raise: an HTTP error status, a timeout (no content token for `timeout_s`, or past
the whole request's deadline), a connection dropped mid-stream or a stream that ends with neither
`[DONE]`, a finish_reason nor usage (some servers never send `[DONE]`) becomes a record with status
"error" and an error text starting with its kind (`http 500`, `timeout`, `disconnected`, `incomplete`,
`server error`, `connect`, `protocol`: bad JSON or HTTP framing). Only an unreachable server at the start raises
`KvplanError`.

The API key is read from the environment variable named by `api_key_env` and only ever placed in
the `Authorization` header. Every text from the server or about it (error bodies, status lines,
headers, SSE errors, exception texts, /metrics errors, probe errors, `server_info`) goes through
`kvplan.stress.redact.redact` before it is stored or raised: the key, any 6+ character prefix of
it, and credential-looking values are masked, and only then is the text cut.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from kvplan.errors import KvplanError

try:  # httpcore asks `import sniffio` on every pool operation; absent (anyio 4 dropped it), each
    import sniffio  # noqa: F401  failed import walks sys.path (~0.2 ms, 13 per request). A None
except ImportError:  # entry makes the import fail at once, and httpcore then assumes asyncio.
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]
from kvplan.results.record import RequestRecord
from kvplan.stress.bounded_http import MAX_PROBE_BYTES, bounded_request
from kvplan.stress.redact import redact_values
from kvplan.stress.targets.http1 import Http1Pool
from kvplan.stress.targets.openai_stream import (
    ApiKind,
    Progress,
    RequestSettings,
    StreamClient,
    make_record,
    one_line,
)
from kvplan.stress.targets.profiler import profiled
from kvplan.stress.targets.prompt_text import ExactPrompts
from kvplan.stress.targets.server_features import KNOWN_KINDS, ServerFeatures, check_server_kind, probe_features
from kvplan.stress.targets.target_url import public_url
from kvplan.stress.telemetry import SCRAPE_TIMEOUT_S, MetricsScraper, cache_config
from kvplan.workload.request import Request

PROBE_TIMEOUT_S = 10.0
PROBE_GENERATE_TIMEOUT_S = 120.0  # a one-token request on a loaded or cold server (transformers serve loads lazily)
COUNT_TOLERANCE = 0.02  # server-counted tokens this far from the scenario's flag the request
MAX_PROBE_ERROR_CHARS = 1000  # a refusal may list the served models


@dataclass(frozen=True)
class HttpRunOutput:
    records: list[RequestRecord]
    telemetry: list[dict[str, float]]  # MetricsScraper samples; `t_s` on the records' clock
    server_info: dict[str, Any]  # url, model, num_gpu_blocks, block_size, cache_config labels, metrics_available
    token_mismatches: list[str]
    errors: dict[str, int]  # error kind -> requests (empty when all succeeded)
    complete: bool = True  # False when interrupted (Ctrl-C): unsent requests are missing, open ones "aborted"


def _refusal(message: str, secret: str | None) -> KvplanError:
    """A probe error: printed to the console, so masked like everything else from the server."""
    return KvplanError(one_line(message, (secret,), max_chars=MAX_PROBE_ERROR_CHARS))


async def _probe(http: httpx.AsyncClient, base: str, served_model_name: str | None, api_key_env: str | None,
                 secret: str | None = None, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Check the server answers; return the model name to send (None: let the server choose)."""
    try:
        health = await bounded_request(http, "GET", f"{base}/health", max_bytes=MAX_PROBE_BYTES,
                                       total_s=timeout_s, timeout=timeout_s)
        models = await bounded_request(http, "GET", f"{base}/v1/models", max_bytes=MAX_PROBE_BYTES,
                                       total_s=timeout_s, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise _refusal(f"cannot reach {base}: {type(exc).__name__}: {exc}", secret) from None
    if models.status_code in (401, 403):
        hint = (
            f"check ${api_key_env}" if api_key_env else "pass --api-key-env VAR naming the variable that holds the key"
        )
        raise KvplanError(f"{base} refused the request (HTTP {models.status_code}): {hint}")
    if models.status_code != 200:
        if health.status_code != 200:
            raise KvplanError(
                f"cannot reach {base}: /health gave HTTP {health.status_code} and /v1/models HTTP {models.status_code}"
            )
        return served_model_name
    try:
        ids = [str(m["id"]) for m in models.json().get("data", [])]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        ids = []
    if served_model_name is not None and ids and served_model_name not in ids:
        raise _refusal(f"{base} does not serve {served_model_name!r}; it serves: {', '.join(ids)}", secret)
    return served_model_name or (ids[0] if ids else None)


async def run_http_target(
    requests: list[Request], *, url: str, api: ApiKind = "completions", served_model_name: str | None = None,
    api_key_env: str | None = None, timeout_s: float = 60.0, concurrency: int | None = None,
    warmup_request_ids: set[str] | frozenset[str] = frozenset(), on_progress: Callable[[int], None] | None = None,
    prompts: ExactPrompts | None = None, server_kind: str = "auto", scrape_interval_s: float = 0.5,
    settings: RequestSettings | None = None, insecure: bool = False, ready_check_timeout_s: float = 0.0,
    link: WorkerLink | None = None, profile: bool = False,
) -> HttpRunOutput:
    """Send `requests` to the server at `url` and measure them; scrape its /metrics meanwhile.

    url: `http(s)://HOST:PORT` (a trailing `/v1` is fine). api: which OpenAI route. served_model_name:
    the `model` field (default: the first of /v1/models). api_key_env: the environment variable
    holding the API key. timeout_s: the bounds of a request: its connect within min(timeout_s,
    10 s), its first content token within timeout_s of sending and each next one within timeout_s
    of the last (pings, empty events and interim heads are not progress), the whole answer within
    timeout_s x (max_tokens + 2); the probe, /health, /models and /metrics reads within
    min(timeout_s, their own bound) each. concurrency: closed loop (all `arrival_s` None) keeps this
    many open; open loop, if given, caps requests in flight. prompts: text prompts of exact token
    length (from --tokenizer). server_kind: auto (probe) or vllm, sglang, tgi, openai. settings:
    what every request carries besides its prompt (vllm bench serve's sampling, header, LoRA
    flags). insecure: no TLS certificate check. ready_check_timeout_s: wait up to this long for
    /health to answer 200 first (vllm bench serve --ready-check-timeout-sec). profile: --profile
    (`profiler.py`; its notes in the server info). link: this process is one of `stress --workers
    N` (workers.py): the parent probed, the clock starts when all are ready, only the first scrapes.
    Raises `KvplanError` only before the run (bad arguments, unreachable server, refused key).
    """
    closed = _check_args(requests, api, timeout_s, concurrency)
    check_server_kind(server_kind)
    secret = api_key(api_key_env)
    base = public_url(url)
    settings = settings or RequestSettings()
    headers = {**settings.headers, **({"Authorization": f"Bearer {secret}"} if secret else {})}
    cold_s = min(timeout_s, PROBE_TIMEOUT_S)  # every read besides the streams: within the same bound
    tls, parts = tls_context(insecure), urlsplit(base)
    # the streamed requests go through http1 (cheap per chunk); httpx keeps the cold paths
    pool = Http1Pool(parts.scheme, parts.hostname or "", parts.port, headers=headers, tls=tls,
                     connect_timeout_s=cold_s, read_timeout_s=timeout_s)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(pool.close)
        http = await stack.enter_async_context(httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(timeout_s, connect=cold_s), trust_env=False, verify=tls))
        if link is not None:
            model, features = link.model, link.features
        else:
            model, features = await probe_server(http, base, parts.path, api, served_model_name, api_key_env, secret,
                                                 server_kind, timeout_s, ready_check_timeout_s)
        if closed:  # closed loop: each of N users holds a connection from the start, so the first wave's TTFT is
            # the server's, not N handshakes (~0.1-0.2 ms CPU each, serialized: +25-45 ms at 256 streams on 2 cores)
            await pool.open_idle(min(int(concurrency or 1), len(requests)))
        profile_notes = await stack.enter_async_context(profiled(http, base, cold_s, profile))  # stops on exit
        start_s = time.perf_counter() if link is None else await link.started()

        def clock_s() -> float:
            return time.perf_counter() - start_s

        client = StreamClient(pool, parts.path, api, model, clock_s, start_s, secret, prompts, features, settings)
        client.prepare(requests)
        scraper = MetricsScraper(http, f"{base}/metrics", clock_s, interval_s=scrape_interval_s, secrets=(secret,),
                                 timeout_s=min(timeout_s, SCRAPE_TIMEOUT_S))
        stop = asyncio.Event()
        scrape_task = asyncio.create_task(scraper.run(stop)) if link is None or link.scrape else None
        records, complete = await _drive(client, requests, concurrency, warmup_request_ids, on_progress)
        stop.set()
        if scrape_task is not None:
            await _final_scrape(scrape_task, 2 * min(timeout_s, SCRAPE_TIMEOUT_S))
    return _output(records, requests, complete, scraper, {  # started_unix_s: the run clock's zero (report --merge)
        "url": base, "api": api, "model": model, **features.info(), "profile": profile_notes,
        "started_unix_s": time.time() - (time.perf_counter() - start_s)}, secret)


async def probe_server(http: httpx.AsyncClient, base: str, path: str, api: str, served_model_name: str | None,
                       api_key_env: str | None, secret: str | None, server_kind: str, timeout_s: float,
                       ready_check_timeout_s: float = 0.0) -> tuple[str | None, ServerFeatures]:
    """Before a run: (wait for /health,) the model name to send and what the server accepts."""
    cold_s = min(timeout_s, PROBE_TIMEOUT_S)
    if ready_check_timeout_s > 0:
        await _wait_until_ready(http, base, ready_check_timeout_s, cold_s)
    model = await _probe(http, base, served_model_name, api_key_env, secret, cold_s)
    return model, await _features(http, base, path, api, model, server_kind, secret,
                                  min(timeout_s, PROBE_GENERATE_TIMEOUT_S))


@dataclass
class WorkerLink:
    """One worker of `kvplan stress --workers N`: what the parent probed, and the common start."""

    model: str | None
    features: ServerFeatures
    scrape: bool  # the first worker scrapes /metrics; the others do not
    start_gate: Callable[[], float]  # blocks until every worker is ready; returns the start (perf_counter)

    async def started(self) -> float:
        start_s = await asyncio.to_thread(self.start_gate)
        await asyncio.sleep(max(0.0, start_s - time.perf_counter()))
        return start_s


async def _final_scrape(task: asyncio.Task, timeout_s: float) -> None:
    """Bounded, so a hung /metrics cannot hold the run."""
    try:
        await asyncio.wait_for(task, timeout=timeout_s)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        task.cancel()


def tls_context(insecure: bool) -> ssl.SSLContext:
    """One context for the run (each client would load the CA bundle again); --insecure: no check."""
    tls = ssl.create_default_context()
    if insecure:  # vllm bench serve --insecure: self-signed certificates
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    return tls


async def _wait_until_ready(http: httpx.AsyncClient, base: str, timeout_s: float, read_s: float) -> None:
    """Poll /health until it answers 200, for up to `timeout_s` (then the probe reports what is wrong)."""
    deadline_s = time.monotonic() + timeout_s
    while time.monotonic() < deadline_s:
        try:
            r = await bounded_request(http, "GET", f"{base}/health", max_bytes=MAX_PROBE_BYTES,
                                      total_s=min(read_s, max(0.1, deadline_s - time.monotonic())), timeout=read_s)
            if r.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(min(1.0, max(0.0, deadline_s - time.monotonic())))


async def _features(http: httpx.AsyncClient, base: str, path: str, api: str, model: str | None, server_kind: str,
                    secret: str | None, timeout_s: float = PROBE_GENERATE_TIMEOUT_S) -> ServerFeatures:
    """What to send: the named kind's features, or the server's answers to a few one-token requests."""
    if server_kind != "auto":
        return KNOWN_KINDS[server_kind]
    url = f"{base}/v1/chat/completions" if api == "chat" else f"{base}/v1/completions"

    async def post(body: dict[str, Any]) -> tuple[int, str]:
        try:
            r = await bounded_request(http, "POST", url, max_bytes=MAX_PROBE_BYTES, total_s=timeout_s,
                                      json=body, timeout=timeout_s)
        except httpx.HTTPError as exc:
            return 0, f"{type(exc).__name__}: {exc}"
        return r.status_code, r.text

    return await probe_features(
        post, api, model, lambda text: one_line(text, (secret,), max_chars=MAX_PROBE_ERROR_CHARS)
    )


def _check_args(requests: list[Request], api: str, timeout_s: float, concurrency: int | None) -> bool:
    """Refuse arguments that cannot make a run; True for a closed loop (no arrival times)."""
    if api not in ("completions", "chat"):
        raise KvplanError(f"--api must be 'completions' or 'chat', got {api!r}")
    if timeout_s <= 0:
        raise KvplanError(f"the request timeout must be positive, got {timeout_s}")
    closed = [r.arrival_s is None for r in requests if not r.follows_turn]  # later turns: sent after replies
    if any(closed) and not all(closed):
        raise KvplanError("requests mix open-loop arrival times with closed-loop (None) ones")
    if any(closed) and not concurrency:
        raise KvplanError("closed-loop requests (no arrival times) need a concurrency")
    if concurrency is not None and concurrency <= 0:
        raise KvplanError(f"concurrency must be positive, got {concurrency}")
    return any(closed)


def api_key(api_key_env: str | None) -> str | None:
    """The API key from the environment variable `api_key_env` (None: no variable named)."""
    if not api_key_env:
        return None
    secret = os.environ.get(api_key_env)
    if not secret:
        raise KvplanError(f"environment variable {api_key_env} (--api-key-env) is not set or empty")
    return secret


def _count_mismatches(records: list[RequestRecord], requests: list[Request]) -> list[str]:
    """Requests whose output (or the server's prompt count) is more than 2% off the scenario's."""
    specs = {r.request_id: r for r in requests}
    out = []
    for r in records:
        if r.status != "ok":
            continue
        spec = specs[r.request_id]
        if abs(r.output_tokens - spec.output_tokens) > COUNT_TOLERANCE * spec.output_tokens:
            out.append(f"{r.request_id}: asked for {spec.output_tokens} tokens, got {r.output_tokens}")
        if (
            r.server_input_tokens is not None
            and abs(r.server_input_tokens - spec.prompt_tokens) > COUNT_TOLERANCE * spec.prompt_tokens
        ):
            out.append(
                f"{r.request_id}: prompt of {spec.prompt_tokens} tokens, the server counted {r.server_input_tokens}"
            )
    return out


def _output(records: list[RequestRecord], requests: list[Request], complete: bool, scraper: MetricsScraper,
            info: dict[str, Any], secret: str | None = None) -> HttpRunOutput:
    errors = Counter((r.error or "").split(":", 1)[0] for r in records if r.status == "error")
    counted = [r for r in records if r.server_input_tokens is not None]
    labels = cache_config(scraper.cache_labels)
    info = {**info, "num_gpu_blocks": labels["num_gpu_blocks"], "block_size": labels["block_size"],
            "cache_config": labels["labels"], "metrics_available": scraper.available,
            "metrics_scrape_errors": scraper.num_errors, "metrics_last_error": scraper.last_error,
            "server_input_tokens": sum(r.server_input_tokens or 0 for r in counted) if counted else None,
            "server_output_tokens": sum(r.server_output_tokens or 0 for r in counted) if counted else None,
            "scenario_input_tokens_of_those": sum(r.prompt_tokens for r in counted) if counted else None}
    info = redact_values(info, (secret,))  # the model name and cache_config labels are the server's texts
    return HttpRunOutput(records=records, telemetry=scraper.samples, server_info=info,
                         token_mismatches=_count_mismatches(records, requests), errors=dict(errors), complete=complete)


async def _drive(client: StreamClient, requests: list[Request], concurrency: int | None, warmup: Iterable[str],
                 on_progress: Callable[[int], None] | None) -> tuple[list[RequestRecord], bool]:
    """Send everything; returns (records in request order, complete)."""
    warmup_ids = set(warmup)
    results: dict[str, RequestRecord] = {}
    in_flight: dict[str, Progress] = {}

    async def one(spec: Request) -> None:
        p = Progress(spec, client.clock_s())
        in_flight[spec.request_id] = p
        error = await client.send(p)
        del in_flight[spec.request_id]
        error = client.scrub(error) if error else None
        results[spec.request_id] = make_record(p, "error" if error else "ok", error, client.clock_s(),
                                           spec.is_warmup or spec.request_id in warmup_ids)
        if on_progress is not None:
            on_progress(len(results))

    tasks: list[asyncio.Task] = []
    complete = True
    try:
        if any(r.session_id is not None for r in requests):  # conversations: later turns resend the replies
            from kvplan.stress.targets.text_turns import drive_sessions

            await drive_sessions(client, requests, concurrency, warmup_ids, on_progress, results, in_flight)
        elif requests and requests[0].arrival_s is None:  # closed loop: N workers, each one request at a time
            queue = iter(requests)

            async def worker() -> None:
                for spec in queue:
                    await one(spec)

            tasks = [asyncio.create_task(worker()) for _ in range(min(int(concurrency or 1), len(requests)))]
        else:  # open loop: send each at its arrival time; `concurrency` (if any) caps requests in flight
            slots = asyncio.Semaphore(concurrency) if concurrency else None

            async def guarded(spec: Request) -> None:
                try:
                    await one(spec)
                finally:
                    if slots is not None:
                        slots.release()

            for spec in sorted(requests, key=lambda r: float(r.arrival_s or 0.0)):
                delay_s = float(spec.arrival_s or 0.0) - client.clock_s()
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
                if slots is not None:
                    await slots.acquire()
                tasks.append(asyncio.create_task(guarded(spec)))
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:  # Ctrl-C: stop sending, keep what was measured
        complete = False
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        now_s = client.clock_s()
        for request_id, p in list(in_flight.items()):
            results[request_id] = make_record(p, "aborted", "aborted: interrupted", now_s,
                                          p.spec.is_warmup or request_id in warmup_ids)
    order = {r.request_id: i for i, r in enumerate(requests)}
    return sorted(results.values(), key=lambda r: order[r.request_id]), complete


def raise_open_files() -> None:
    """Thousands of concurrent streams need as many sockets: the soft open-file limit up to the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else max(soft, 65536), hard)
            )
    except (ImportError, ValueError, OSError):
        pass


def run_http(requests: list[Request], **kwargs: Any) -> HttpRunOutput:
    """Synchronous `run_http_target` (same keyword arguments), the open-file limit raised first."""
    raise_open_files()
    return asyncio.run(run_http_target(requests, **kwargs))
