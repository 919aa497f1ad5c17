"""Memory probes for a stress run: process RSS, CUDA allocator figures, an NVML sampler, and the
memory this process may still take (`headroom_bytes`: what a run's requests are checked against
before any is generated).

The engine's own KV accounting (blocks in use x bytes per block) comes from its step stats; these
probes add what the operating system and the device see. Every probe degrades to `None` where its
source is missing (no CUDA, no NVML driver) instead of failing the run.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field


def _status_kib(key: str, path: str = "/proc/self/status") -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    try:
        limit = open("/sys/fs/cgroup/memory.max").read().strip()
        used = int(open("/sys/fs/cgroup/memory.current").read().strip())
        return None if limit == "max" else int(limit) - used
    except (OSError, ValueError):
        return None


def headroom_bytes() -> int | None:
    """The most this process may still allocate: the least of its address-space limit (ulimit -v)
    less its address space now, the machine's available memory, and its cgroup's limit less its
    use; None when none is known."""
    rooms: list[int] = []
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        size_kib = _status_kib("VmSize")
        if soft != resource.RLIM_INFINITY and size_kib is not None:
            rooms.append(soft - size_kib * 1024)
    except (ImportError, ValueError, OSError):
        pass
    available_kib = _status_kib("MemAvailable", "/proc/meminfo")
    if available_kib is not None:
        rooms.append(available_kib * 1024)
    cgroup = _cgroup_room()
    if cgroup is not None:
        rooms.append(cgroup)
    return max(0, min(rooms)) if rooms else None


def rss_bytes() -> int | None:
    """Resident set size of this process (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def cuda_bytes() -> tuple[int | None, int | None]:
    """(`torch.cuda.memory_allocated`, `max_memory_allocated`) when torch already runs on CUDA."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None, None
    return int(torch.cuda.memory_allocated()), int(torch.cuda.max_memory_allocated())


@dataclass
class NvmlSampler:
    """Samples device memory used (NVML) every `interval_s` on a daemon thread."""

    device_index: int = 0
    interval_s: float = 0.1
    samples: list[tuple[float, int]] = field(default_factory=list)  # (perf_counter seconds, bytes used)
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> NvmlSampler:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(self.device_index)
        except Exception as exc:  # no driver / no GPU: record why, sample nothing
            self.error = f"NVML unavailable: {exc}"
            return self

        def run() -> None:
            while not self._stop.is_set():
                self.samples.append((time.perf_counter(), int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)))
                self._stop.wait(self.interval_s)

        self._thread = threading.Thread(target=run, name="kvplan-nvml", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            try:
                import pynvml

                pynvml.nvmlShutdown()
            except Exception:
                pass

    @property
    def peak_bytes(self) -> int | None:
        return max((b for _, b in self.samples), default=None)
