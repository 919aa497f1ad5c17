"""`kvplan stress --target URL --workers N`: N client processes, one merged run.

The parent probes the server once (model, what it accepts), deals the requests out in turn
(request i to worker i mod N; an open loop keeps every arrival time, a closed loop's users are
shared out), and starts N spawned processes. Each opens its connections, then waits at a barrier;
the parent sets one start time and every worker's clock counts from it (`time.perf_counter()` is
the machine's monotonic clock, the same in every process), so their records are on one clock and
merge as they are: percentiles come from every raw sample, never from per-worker percentiles. The
first worker scrapes /metrics. Ctrl-C stops the workers' sending; what each measured is kept, the
run marked incomplete.
"""
from __future__ import annotations

import asyncio
import multiprocessing
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from kvplan.errors import KvplanError
from kvplan.stress.targets.openai_http import HttpRunOutput, WorkerLink, raise_open_files, run_http_target
from kvplan.workload.request import Request

MAX_WORKERS = 256
START_DELAY_S = 0.05  # after the last worker is ready: every process is waiting on the same instant
JOIN_TIMEOUT_S = 60.0  # a worker that does not report this long after the parent saw the run end


def deal(requests: list[Request], workers: int, concurrency: int | None) -> list[tuple[list[Request], int | None]]:
    """Worker w's requests (every N-th from w) and its share of the concurrency; never more workers
    than requests or than the concurrency allows (each needs at least one request in flight)."""
    n = max(1, min(workers, len(requests), concurrency or workers))
    return [(requests[w::n], None if concurrency is None else concurrency // n + (w < concurrency % n))
            for w in range(n)]


def _worker(index: int, requests: list[Request], kwargs: dict[str, Any], link: dict[str, Any], barrier: Any,
            start_at: Any, go: Any, stop: Any, done: Any, results: Any) -> None:
    """One worker process: run its share and put (index, output or error text) on `results`."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C: it sets `stop`

    def gate() -> float:
        barrier.wait()
        go.wait()
        return float(start_at.value)

    def progress(_: int) -> None:
        with done.get_lock():
            done.value += 1

    async def main() -> HttpRunOutput:
        task, loop = asyncio.current_task(), asyncio.get_running_loop()
        assert task is not None, "called from a task"
        threading.Thread(target=lambda: (stop.wait(), loop.call_soon_threadsafe(task.cancel)), daemon=True).start()
        prompts = None
        if kwargs.get("tokenizer"):
            from kvplan.stress.targets.prompt_text import ExactPrompts
            from kvplan.workload.datasets.text import load_prompt_tokenizer

            prompts = ExactPrompts(load_prompt_tokenizer(kwargs["tokenizer"]), kwargs.get("api", "completions"))
        args = {k: v for k, v in kwargs.items() if k != "tokenizer"}
        return await run_http_target(requests, **args, prompts=prompts, on_progress=progress,
                                     link=WorkerLink(**link, start_gate=gate))

    try:
        results.put((index, asyncio.run(main())))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as data, one line
        barrier.abort()
        results.put((index, f"{type(exc).__name__}: {exc}"))


def merge(outputs: list[HttpRunOutput], order: dict[str, int]) -> HttpRunOutput:
    """One run: every record (in request order), the first worker's telemetry and server facts."""
    records = sorted((r for o in outputs for r in o.records), key=lambda r: order[r.request_id])
    errors: Counter[str] = Counter()
    for o in outputs:
        errors.update(o.errors)
    first = outputs[0]
    counted = [o.server_info for o in outputs]
    info = dict(first.server_info)
    for key in ("server_input_tokens", "server_output_tokens", "scenario_input_tokens_of_those"):
        values = [i.get(key) for i in counted if i.get(key) is not None]
        info[key] = sum(values) if values else None
    info["workers"] = len(outputs)
    return HttpRunOutput(records=records, telemetry=first.telemetry, server_info=info,
                         token_mismatches=[m for o in outputs for m in o.token_mismatches], errors=dict(errors),
                         complete=all(o.complete for o in outputs))


def run_http_workers(requests: list[Request], workers: int, on_progress: Callable[[int], None] | None = None,
                     **kwargs: Any) -> HttpRunOutput:
    """`run_http_target`'s keyword arguments (`prompts` as `tokenizer`, a path each worker loads),
    run by `workers` processes; one merged output."""
    if not 1 <= workers <= MAX_WORKERS:
        raise KvplanError(f"--workers must be in 1..{MAX_WORKERS}, got {workers}")
    raise_open_files()  # the spawned workers inherit the raised limit
    model, features = asyncio.run(_probe(kwargs))
    ctx = multiprocessing.get_context("spawn")
    shares = deal(requests, workers, kwargs.pop("concurrency", None))
    barrier, start_at, go, stop = ctx.Barrier(len(shares) + 1), ctx.Value("d", 0.0), ctx.Event(), ctx.Event()
    done, results = ctx.Value("i", 0), ctx.Queue()
    procs = [ctx.Process(target=_worker, daemon=True, args=(
        w, reqs, {**kwargs, "concurrency": share}, {"model": model, "features": features, "scrape": w == 0},
        barrier, start_at, go, stop, done, results)) for w, (reqs, share) in enumerate(shares)]
    for p in procs:
        p.start()
    got: dict[int, HttpRunOutput | str] = {}
    try:
        barrier.wait(timeout=120.0)  # every worker ready (connections open, prompts built)
        start_at.value = time.perf_counter() + START_DELAY_S
        go.set()
        _collect(procs, results, got, done, on_progress)
    except KeyboardInterrupt:
        stop.set()
        _collect(procs, results, got, done, None, deadline_s=time.monotonic() + JOIN_TIMEOUT_S)
    except threading.BrokenBarrierError:
        _collect(procs, results, got, done, None, deadline_s=time.monotonic() + 5.0)
    finally:
        for p in procs:
            p.join(timeout=5.0)
            if p.is_alive():
                p.terminate()
    failed = [v for v in got.values() if isinstance(v, str)]
    outputs = [v for _, v in sorted(got.items()) if not isinstance(v, str)]
    if failed or not outputs:
        raise KvplanError(f"a --workers process failed: {(failed or ['it exited without a result'])[0][:300]}")
    merged = merge(outputs, {r.request_id: i for i, r in enumerate(requests)})
    if len(outputs) < len(procs) or stop.is_set():
        merged = HttpRunOutput(merged.records, merged.telemetry, merged.server_info, merged.token_mismatches,
                               merged.errors, complete=False)
    return merged


def _collect(procs: list[Any], results: Any, got: dict[int, Any], done: Any,
             on_progress: Callable[[int], None] | None, deadline_s: float | None = None) -> None:
    while len(got) < len(procs):
        if deadline_s is not None and time.monotonic() > deadline_s:
            return
        try:
            index, value = results.get(timeout=0.2)
            got[index] = value
        except queue.Empty:
            if not any(p.is_alive() for p in procs) and results.empty():
                return
        if on_progress is not None:
            on_progress(int(done.value))


async def _probe(kwargs: dict[str, Any]) -> tuple[str | None, Any]:
    """The parent's one probe, with the same bounds a single-process run has."""
    from urllib.parse import urlsplit

    import httpx

    from kvplan.stress.targets.openai_http import api_key, probe_server, tls_context
    from kvplan.stress.targets.openai_stream import RequestSettings
    from kvplan.stress.targets.target_url import public_url

    base, timeout_s = public_url(kwargs["url"]), float(kwargs.get("timeout_s", 60.0))
    secret = api_key(kwargs.get("api_key_env"))
    settings = kwargs.get("settings") or RequestSettings()
    headers = {**settings.headers, **({"Authorization": f"Bearer {secret}"} if secret else {})}
    cold_s = min(timeout_s, 10.0)
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout_s, connect=cold_s), trust_env=False,
                                 verify=tls_context(bool(kwargs.get("insecure")))) as http:
        return await probe_server(http, base, urlsplit(base).path, kwargs.get("api", "completions"),
                                  kwargs.get("served_model_name"), kwargs.get("api_key_env"), secret,
                                  kwargs.get("server_kind", "auto"), timeout_s,
                                  float(kwargs.get("ready_check_timeout_s", 0.0)))
