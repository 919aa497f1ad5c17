"""The engine thread of `kvplan serve`: one thread owns the `LLMEngine` and steps it.

The engine is single-threaded torch, so every call into it (add, abort, step) happens on this
thread. Request handlers (asyncio) send commands through a thread-safe queue and receive their
tokens on an `asyncio.Queue`; the thread hands one step's events to the event loop with a single
`call_soon_threadsafe` per step (one wake-up of the loop, however many requests got a token).
When the engine has nothing to do the thread blocks on the command queue, so an idle server
burns no CPU and a new request starts at once.

A step that fails for some requests (the model or sampler raised for them) fails only those: the
engine finishes them with reason "error" and frees their blocks, and each gets an `ErrorEvent`
(status 500) while the others go on (kvplan.engine.isolation finds the culprit). Should a step
raise anyway, every request the engine holds is aborted with an `ErrorEvent` and the loop goes
on if the pool is then empty, as it must be. The loop dies, `/health` turns 503 and new requests
are refused (vLLM's behaviour when its engine dies) only when the engine says its state is
lost (`EngineDeadError`), when that clean-up does not leave an empty pool, or after
`MAX_CONSECUTIVE_STEP_FAILURES` such steps in a row.
"""
from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvplan.engine.isolation import EngineDeadError
from kvplan.server.prometheus_metrics import ServerMetrics

IDLE_WAIT_S = 0.5  # how long an idle thread sleeps on the command queue before checking for stop
MAX_CONSECUTIVE_STEP_FAILURES = 3  # steps in a row that raised with no request to blame: the engine is broken


@dataclass(frozen=True)
class TokenEvent:
    """Tokens one request got in one step."""

    token_ids: tuple[int, ...]
    num_prompt_tokens: int
    num_output_tokens: int
    finished: bool
    finish_reason: str | None


@dataclass(frozen=True)
class ErrorEvent:
    """The request ends with an error: 400 when the engine refused it, 500 when its step failed."""

    message: str
    status: int = 500


Event = TokenEvent | ErrorEvent


@dataclass(frozen=True)
class _Add:
    request_id: str
    prompt_token_ids: tuple[int, ...]
    params: Any  # SamplingParams
    arrival_time_s: float
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue


@dataclass(frozen=True)
class _Abort:
    request_id: str


class _Stop:
    pass


def _deliver(batch: Sequence[tuple[asyncio.Queue, Event]]) -> None:
    for events, event in batch:
        events.put_nowait(event)


class EngineLoop:
    """Owns the engine; `submit` and `abort` may be called from any thread or coroutine."""

    def __init__(self, engine: Any, metrics: ServerMetrics | None = None) -> None:
        self._engine = engine
        self._metrics = metrics
        self._commands: queue.SimpleQueue[_Add | _Abort | _Stop] = queue.SimpleQueue()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}  # engine thread only
        self._thread = threading.Thread(target=self._run, name="kvplan-engine", daemon=True)
        self._stopping = threading.Event()
        self.dead_reason: str | None = None  # set when the engine's state is lost; the loop is then stopped
        self.num_failed_steps = 0  # steps that raised out of the engine (their requests all failed)
        self._consecutive_failures = 0

    # --- any thread -------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        self._commands.put(_Stop())
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    @property
    def healthy(self) -> bool:
        return self.dead_reason is None and self._thread.is_alive() and not self._stopping.is_set()

    def submit(
        self, request_id: str, prompt_token_ids: tuple[int, ...], params: Any, arrival_time_s: float
    ) -> asyncio.Queue:
        """Queue a request (call from a coroutine); its events arrive on the returned queue."""
        events: asyncio.Queue = asyncio.Queue()
        self._commands.put(
            _Add(request_id, prompt_token_ids, params, arrival_time_s, asyncio.get_running_loop(), events)
        )
        return events

    def abort(self, request_id: str) -> None:
        self._commands.put(_Abort(request_id))

    # --- the engine thread ------------------------------------------------------------------------
    def _run(self) -> None:
        engine = self._engine
        while not self._stopping.is_set():
            busy = engine.has_unfinished_requests()
            try:
                command = self._commands.get_nowait() if busy else self._commands.get(timeout=IDLE_WAIT_S)
            except queue.Empty:
                command = None
            while command is not None:
                if isinstance(command, _Stop):
                    return
                self._apply(command)
                try:
                    command = self._commands.get_nowait()
                except queue.Empty:
                    command = None
            if engine.has_unfinished_requests() and not self._guarded_step():
                return

    def _apply(self, command: _Add | _Abort) -> None:
        if isinstance(command, _Abort):
            if self._streams.pop(command.request_id, None) is not None:
                self._engine.abort(command.request_id)
                if self._metrics is not None:
                    self._metrics.forget(command.request_id)
                    self._refresh_gauges()
            return
        try:
            self._engine.add_request(list(command.prompt_token_ids), command.params, request_id=command.request_id,
                                     arrival_time_s=command.arrival_time_s)
        except Exception as exc:  # noqa: BLE001 - a refused request fails alone (the handler maps it to 400)
            command.loop.call_soon_threadsafe(_deliver, [(command.events, ErrorEvent(str(exc), 400))])
            return
        self._streams[command.request_id] = (command.loop, command.events)

    def _refresh_gauges(self) -> None:
        """Queue and block gauges between steps: an abort frees blocks, and an idle engine takes
        no further step that would report it (read-only looks at the engine, on its own thread)."""
        engine, m = self._engine, self._metrics
        if m is None:
            return
        sched, blocks = engine.scheduler, engine.block_manager
        m.num_requests_running.set(len(sched.running))
        m.num_requests_waiting.set(len(sched.waiting))
        m.num_requests_swapped.set(len(sched.swapped))
        m.kv_cache_usage_perc.set(blocks.num_used_blocks / blocks.num_blocks if blocks.num_blocks else 0.0)
        m.kv_bytes_in_use.set(blocks.num_used_blocks * engine.bytes_per_block)

    def _guarded_step(self) -> bool:
        """One step; False when the engine is dead (the loop then stops)."""
        try:
            self._step()
        except EngineDeadError as exc:
            self._die(f"engine step failed: {exc}")
            return False
        except Exception as exc:  # noqa: BLE001 - no request to blame: fail what the engine holds, then judge
            return self._recover(f"engine step failed: {type(exc).__name__}: {exc}")
        self._consecutive_failures = 0
        return True

    def _recover(self, reason: str) -> bool:
        """Abort every request the engine holds, each with `reason`; True if the engine is then
        empty (every block free) and this has not happened too often in a row."""
        self.num_failed_steps += 1
        self._consecutive_failures += 1
        try:
            for request_id in list(self._streams):
                self._engine.abort(request_id)
                if self._metrics is not None:
                    self._metrics.forget(request_id)
            clean = not self._engine.has_unfinished_requests() and self._engine.block_manager.num_used_blocks == 0
        except Exception as exc:  # noqa: BLE001 - the engine cannot even abort: it is gone
            clean, reason = False, f"{reason}; then abort failed: {type(exc).__name__}: {exc}"
        self._fail_streams(reason)
        if self._metrics is not None and clean:
            self._refresh_gauges()
        if not clean or self._consecutive_failures >= MAX_CONSECUTIVE_STEP_FAILURES:
            self._die(reason if clean else f"{reason} (the KV pool was not empty afterwards)")
            return False
        return True

    def _step(self) -> None:
        outputs = self._engine.step()
        stats = self._engine.stats
        if self._metrics is not None and stats is not None:
            self._metrics.observe_step(stats)
        batches: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, Event]]] = {}
        for out in outputs:
            event: Event
            if out.error is not None:
                if self._metrics is not None:
                    self._metrics.forget(out.request_id)
                event = ErrorEvent(f"the engine step failed for this request: {out.error}", 500)
            else:
                if self._metrics is not None:
                    self._metrics.observe_output(out)
                event = TokenEvent(out.new_token_ids, out.num_prompt_tokens, out.num_output_tokens, out.finished,
                                   out.finish_reason)
            target = self._streams.pop(out.request_id, None) if out.finished else self._streams.get(out.request_id)
            if target is None:
                continue  # aborted meanwhile
            loop, events = target
            batches.setdefault(loop, []).append((events, event))
        for loop, batch in batches.items():
            try:
                loop.call_soon_threadsafe(_deliver, batch)
            except RuntimeError:  # that event loop has closed (server shutting down)
                pass

    def _die(self, reason: str) -> None:
        self.dead_reason = reason
        self._fail_streams(reason)

    def _fail_streams(self, reason: str) -> None:
        for loop, events in self._streams.values():
            try:
                loop.call_soon_threadsafe(_deliver, [(events, ErrorEvent(reason, 500))])
            except RuntimeError:
                pass
        self._streams.clear()


def now_s() -> float:
    """The engine's clock (arrival times handed to `submit` must use it)."""
    return time.perf_counter()
