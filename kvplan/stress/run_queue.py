"""How long this thread sat runnable but waiting for a CPU (Linux's run-queue delay).

`/proc/thread-self/schedstat` holds three numbers: CPU time, time spent waiting on a run queue,
and time slices run, in nanoseconds. The wait field is complete whenever the thread reads it (the
thread is running, so every wait it had is over); the CPU-time field lags until the next tick, so
CPU time comes from `time.thread_time()` instead. A neighbour taking the core shows up here and
nowhere else: sleeping, I/O and the engine's own work do not count as waiting.
"""
from __future__ import annotations

from pathlib import Path

SCHEDSTAT = Path("/proc/thread-self/schedstat")


class RunQueueClock:
    """Cumulative run-queue wait of the thread that calls `wait_s`; `available` False where the
    OS does not expose it (then `wait_s` returns None)."""

    def __init__(self, path: Path = SCHEDSTAT) -> None:
        self._file = None
        try:
            self._file = open(path, "rb", buffering=0)  # kept open: one read per engine step
            self._read()
        except (OSError, ValueError, IndexError):
            self.close()

    @property
    def available(self) -> bool:
        return self._file is not None

    def _read(self) -> float:
        assert self._file is not None
        self._file.seek(0)
        return int(self._file.read().split()[1]) / 1e9

    def wait_s(self) -> float | None:
        if self._file is None:
            return None
        try:
            return self._read()
        except (OSError, ValueError, IndexError):
            self.close()
            return None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = None
