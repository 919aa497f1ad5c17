"""Writing result files: checked before the work, atomically, all or none, and never over a device.

- `check_output_path` / `check_output_dir` run before a command does its work: the target is not
  a directory (or is one, for a folder), and the nearest existing folder is a folder where a file
  can be created (probed by creating and removing one, which also catches read-only mounts,
  /proc, /sys and immutable folders, where permission bits say nothing to root).
- `write_files` writes several files as one: each to a temp file beside its target
  (`.NAME.PID.XXXX.tmp`), fsync, and only when every one is written are they renamed into place
  (Ctrl-C deferred until all are in place). A failure (disk full, permissions) removes every temp file
  and every folder it created, so a command writes all of its files or none. Temp files of a
  process that died (kill -9) are removed by the next write to the same target.
- A regular file (or a new path) is replaced atomically; anything else that already exists at the
  path (a character device such as /dev/stdout or /dev/null, a FIFO, a socket) is written in place,
  never replaced: `-o /dev/stdout` works, and `-o /dev/full` is one `KvplanError` line. Those are
  written before the regular files are renamed into place, so their failure (disk full, a FIFO
  nobody reads) leaves the regular files untouched too.
"""
from __future__ import annotations

import errno
import os
import re
import signal
import stat
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from kvplan.errors import KvplanError


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def _mode(path: Path) -> int | None:
    try:
        return path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as exc:
        raise KvplanError(f"cannot write {path}: {_reason(exc) if isinstance(exc, OSError) else exc}") from None


def _nearest_existing(path: Path) -> Path:
    for parent in path.absolute().parents:
        if _mode(parent) is not None:
            return parent
    return Path("/")


def _probe_folder(folder: Path, target: Path) -> None:
    """Create and remove a file in `folder`: the one test of writability that is true for root too."""
    if not stat.S_ISDIR(_mode(folder) or 0):
        raise KvplanError(f"cannot write {target}: {folder} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".kvplan-probe.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise KvplanError(f"cannot write {target}: {folder} is not writable ({_reason(exc)})") from None


def check_output_path(path: str | Path, inputs: Iterable[str | Path | None] = (), flag: str = "--out") -> Path:
    """Refuse, before any work, an output file that cannot be written (see the module doc), or one
    that is any of `inputs` once both are resolved as the kernel will (links followed, `..` taken
    after the folders a write would create: `newdir/../r.json` is `r.json`)."""
    target = Path(path)
    real = os.path.realpath(target)
    for source in inputs:
        if source is not None and os.path.realpath(source) == real:
            raise KvplanError(f"{flag} {target} is {source}, an input of this command: choose another file")
    mode = _mode(target)
    if mode is not None and stat.S_ISDIR(mode):
        raise KvplanError(f"cannot write {target}: it is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        if not os.access(target, os.W_OK):
            raise KvplanError(f"cannot write {target}: permission denied")
        return target
    _probe_folder(target.parent if _mode(target.parent) is not None else _nearest_existing(target), target)
    return target


def check_output_dir(path: str | Path) -> Path:
    """Refuse, before any work, an output folder that is not one or where no file can be created."""
    folder = Path(path)
    mode = _mode(folder)
    if mode is not None and not stat.S_ISDIR(mode):
        raise KvplanError(f"cannot write into {folder}: it exists and is not a directory")
    _probe_folder(folder if mode is not None else _nearest_existing(folder), folder)
    return folder


_TMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[^.]+\.tmp$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def remove_stale_temps(folder: Path, name: str) -> None:
    """Temp files of `name` left in `folder` by a process that no longer runs (kill -9, power loss)."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return
    for entry in entries:
        m = _TMP.match(entry.name)
        if m and m.group("name") == name and int(m.group("pid")) != os.getpid() and not _pid_alive(int(m.group("pid"))):
            entry.unlink(missing_ok=True)


_DEFERRING: list[bool] = []  # non-empty while a sigint_deferred block runs (blocks nest)


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Ctrl-C waits until the block is done (main thread only), then interrupts as usual. Nested
    blocks defer to the outermost one: an inner block must not raise inside the outer."""
    if threading.current_thread() is not threading.main_thread() or _DEFERRING:
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    _DEFERRING.append(True)
    try:
        yield
    finally:
        _DEFERRING.pop()
        signal.signal(signal.SIGINT, previous)
        if caught:
            raise KeyboardInterrupt


def _make_parents(folder: Path, created: list[Path], target: Path) -> None:
    missing = [p for p in (folder, *folder.parents) if _mode(p) is None]
    for p in reversed(missing):
        try:
            p.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise KvplanError(f"cannot write {target}: cannot create {p} ({_reason(exc)})") from None
        created.append(p)


def _stage(target: Path, data: bytes, mode: int | None, created: list[Path]) -> str:
    """Write `data` to a temp file beside `target`; returns its path."""
    _make_parents(target.parent, created, target)
    remove_stale_temps(target.parent, target.name)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise KvplanError(f"cannot write {target}: {_reason(exc)}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp makes 0600 files; reports and baselines are shared, so keep the old file's mode or use 0644
        os.chmod(tmp, stat.S_IMODE(mode) if mode is not None else 0o644)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise KvplanError(f"cannot write {target}: {_reason(exc)}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def _open_in_place(target: Path) -> int:
    """Open a device, FIFO or socket path for writing; a FIFO nobody reads is refused at once
    (opening it would block forever)."""
    try:
        if stat.S_ISFIFO(target.stat().st_mode):
            fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
            os.set_blocking(fd, True)
            return fd
        return os.open(target, os.O_WRONLY | os.O_TRUNC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise KvplanError(f"cannot write {target}: a FIFO that no process is reading") from None
        raise KvplanError(f"cannot write {target}: {_reason(exc)}") from None


def _write_fd(target: Path, fd: int, data: bytes) -> None:
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        raise KvplanError(f"cannot write {target}: {_reason(exc)}") from None


def _undo(temps: Iterable[str], created: list[Path]) -> None:
    for tmp in temps:
        Path(tmp).unlink(missing_ok=True)
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            pass


def write_files(
    contents: Mapping[str, str | bytes] | Mapping[Path, str | bytes] | Mapping[str | Path, str | bytes],
    remove: Iterable[str | Path] = (),
) -> list[Path]:
    """Write every file of `contents` (text is UTF-8) or none of them, then delete `remove` (files
    of an earlier run that the new ones supersede). Raises one-line `KvplanError`s."""
    items = [(Path(p), d.encode("utf-8") if isinstance(d, str) else d) for p, d in contents.items()]
    modes = {path: _mode(path) for path, _ in items}
    for path, mode in modes.items():
        if mode is not None and stat.S_ISDIR(mode):
            raise KvplanError(f"cannot write {path}: it is a directory")
    in_place = [(p, d) for p, d in items if modes[p] is not None and not stat.S_ISREG(modes[p] or 0)]
    device_paths = {p for p, _ in in_place}
    staged: dict[Path, str] = {}
    created: list[Path] = []
    opened: dict[Path, int] = {}
    # Ctrl-C waits until every file is in place (a second Ctrl-C while a stopped run saves its
    # partial result must not lose it); kill -9 cannot wait, and leaves old-or-new files plus temps.
    # Order: devices and FIFOs opened (a FIFO without a reader is refused), regular files staged,
    # devices written, then the renames: a failure before the renames leaves every regular file as it was.
    with sigint_deferred():
        try:
            for path, _ in in_place:
                opened[path] = _open_in_place(path)
            for path, data in items:
                if path not in device_paths:
                    staged[path] = _stage(path, data, modes[path], created)
            for path, data in in_place:
                _write_fd(path, opened.pop(path), data)
        except BaseException:
            for fd in opened.values():
                os.close(fd)
            _undo(staged.values(), created)
            raise
        for path, tmp in list(staged.items()):
            try:
                os.replace(tmp, path)
            except OSError as exc:
                _undo([t for p, t in staged.items() if Path(t).exists()], [])
                raise KvplanError(f"cannot write {path}: {_reason(exc)}") from None
        for old in remove:
            if Path(old) not in staged:
                Path(old).unlink(missing_ok=True)
    return [p for p, _ in items]


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write `text` to `path`: atomically for regular files, in place for devices, FIFOs and
    sockets. Temp files are removed on every exit path Python sees (an error, Ctrl-C)."""
    return write_files({path: text})[0]


def child_path(root: str | Path, *parts: str) -> Path:
    """`root / parts...`, refused when it would land outside `root` (a name such as `../../x` or
    `/abs/x` coming from a file kvplan reads); explicit user paths never go through here."""
    base = Path(root).resolve()
    path = Path(root, *parts)
    if not path.resolve().is_relative_to(base) or any(Path(p).is_absolute() for p in parts):
        raise KvplanError(f"{'/'.join(parts)!r} would be written outside {root}; names must not contain '/' or '..'")
    return path
