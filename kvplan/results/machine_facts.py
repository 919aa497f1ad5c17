"""Facts about the machine a run or a calibration was made on, so that a calibration from another
machine (or another torch, whose kernels time differently) is caught rather than trusted."""
from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")
# what must match for a calibration's step times to carry over (host names change under CI)
COMPARED = ("cpu_model", "cores", "torch")


def cpu_model(cpuinfo: Path = CPUINFO) -> str | None:
    """The CPU's marketing name ("AMD EPYC 7B13"); platform.processor() is empty on most Linux."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware")) and ":" in line:
                return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or None


def _torch_version() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class MachineFacts:
    cpu_model: str | None
    cores: int | None  # usable by this process (affinity)
    torch: str | None
    host: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def differences(self, other: dict[str, Any] | None) -> list[str]:
        """What differs from `other` (a calibration's stored facts), as "name: theirs -> ours"."""
        if not other:
            return [
                "the calibration does not record which machine it was made on, so it may not be this machine's speed"
            ]
        ours = self.to_dict()
        return [f"{k} {other.get(k)!r} there, {ours[k]!r} here" for k in COMPARED if other.get(k) != ours[k]]


def machine_facts() -> MachineFacts:
    """This machine, read without importing torch."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return MachineFacts(cpu_model(), cores, _torch_version(), platform.node())
