"""Writing result files: atomically, so a reader never sees half of one, and never over a device.

A regular file (or a new path) is replaced atomically: a temp file beside it, fsync, `os.replace`.
Anything else that already exists at the path (a character device such as /dev/stdout or
/dev/null, a FIFO, a socket) is written to in place, never replaced: `-o /dev/stdout` works, and
`-o /dev/full` is one `KvplanError` line, not a regular file where the device was.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from kvplan.errors import KvplanError


def _write_in_place(target: Path, text: str) -> Path:
    try:
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise KvplanError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write `text` to `path`: atomically for regular files, in place for devices, FIFOs and
    sockets. Shared by result.json, report.html, JUnit XML and baselines. Temp files are removed on
    every exit path Python sees (an error, Ctrl-C)."""
    target = Path(path)
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise KvplanError(f"cannot write {target}: {exc.strerror or exc}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise KvplanError(f"cannot write {target}: it is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        return _write_in_place(target, text)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise KvplanError(f"cannot write {target}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp makes 0600 files; reports and baselines are shared, so keep the old file's mode or use 0644
        os.chmod(tmp, stat.S_IMODE(mode) if mode is not None else 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise KvplanError(f"cannot write {target}: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def child_path(root: str | Path, *parts: str) -> Path:
    """`root / parts...`, refused when it would land outside `root` (a name such as `../../x` or
    `/abs/x` coming from a file kvplan reads); explicit user paths never go through here."""
    base = Path(root).resolve()
    path = Path(root, *parts)
    if not path.resolve().is_relative_to(base) or any(Path(p).is_absolute() for p in parts):
        raise KvplanError(f"{'/'.join(parts)!r} would be written outside {root}; names must not contain '/' or '..'")
    return path
