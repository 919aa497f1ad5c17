"""How many intra-op threads the engine runs with, chosen on purpose rather than left to torch.

torch starts one OpenMP thread per core it sees. When another process keeps a core busy, every
parallel region then waits for the thread that shares a core with it, and a step that took 17 ms
can take seconds (5-28x measured on a 2-core box). The engine therefore takes `--threads` when
given, else `OMP_NUM_THREADS` when the user set it, else the cores this process may run on
(`os.sched_getaffinity`) minus the ones other processes keep busy right now (runnable tasks in
/proc/stat, sampled over a few tens of milliseconds), and never fewer than one.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
SAMPLES = 5
SAMPLE_GAP_S = 0.01


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    usable_cores: int  # cores this process may run on (affinity)
    busy_elsewhere: float | None  # runnable tasks of other processes, mean over the samples; None: unknown
    how: str  # "--threads", "OMP_NUM_THREADS", "free cores" or "usable cores"


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity (containers and taskset narrow it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def _procs_running(stat: Path) -> int | None:
    try:
        for line in stat.read_text().splitlines():
            if line.startswith("procs_running "):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def busy_elsewhere(stat: Path = PROC_STAT, samples: int = SAMPLES, gap_s: float = SAMPLE_GAP_S) -> float | None:
    """Runnable tasks besides the one asking (which is running while it reads), averaged over
    `samples` reads `gap_s` apart; None where the OS does not say (no /proc/stat)."""
    counts = []
    for i in range(samples):
        n = _procs_running(stat)
        if n is None:
            return None
        counts.append(max(0, n - 1))
        if i + 1 < samples:
            time.sleep(gap_s)
    return sum(counts) / len(counts)


def choose_threads(requested: int | None = None, stat: Path = PROC_STAT) -> ThreadChoice:
    """The thread count and why; see the module doc for the order of precedence."""
    cores = usable_cores()
    if requested is not None:
        return ThreadChoice(requested, cores, None, "--threads")
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return ThreadChoice(int(env), cores, None, "OMP_NUM_THREADS")
    busy = busy_elsewhere(stat)
    if busy is None:
        return ThreadChoice(cores, cores, None, "usable cores")
    return ThreadChoice(max(1, min(cores, round(cores - busy))), cores, busy, "free cores")


def apply_threads(requested: int | None = None) -> ThreadChoice:
    """Choose, then set torch's intra-op threads (process-wide)."""
    import torch

    choice = choose_threads(requested)
    torch.set_num_threads(choice.threads)
    return choice
