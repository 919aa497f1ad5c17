"""User-facing errors. The CLI maps every `KvplanError` to one readable line and exit code 2."""
from __future__ import annotations

import difflib
import re
import stat
from collections.abc import Iterable
from pathlib import Path


class KvplanError(Exception):
    """A user mistake (bad flag, unknown name, bad file): one line, exit code 2, no traceback."""

    exit_code = 2


class Interrupted(KvplanError):
    """Ctrl-C before anything was measured: one line, and the shell's code for SIGINT."""

    exit_code = 130


class UnknownNameError(KvplanError):
    """A model or GPU name that is not in the catalog."""

    def __init__(self, kind: str, value: str, choices: Iterable[str]) -> None:
        choices = sorted(set(choices))
        value = value if len(value) <= 60 else value[:57] + "..."  # a message names the value, never a whole document
        close = close_names(value.lower(), choices)
        hint = (
            f"did you mean: {', '.join(close)}?"
            if close
            else f"choices: {', '.join(choices[:12])}{' ...' if len(choices) > 12 else ''}"
        )
        super().__init__(f"unknown {kind} {value!r}; {hint}")


_SIZE = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)b(?![a-z0-9])")  # "70b" in llama-3.1-70b, not "a3b"
_FAMILY = re.compile(r"^[a-z]+")


def close_names(value: str, choices: list[str], n: int = 5) -> list[str]:
    """Names to suggest for `value`: same family and same size first (llama-3-70b-instruct ->
    llama-3.3-70b-instruct before llama-3-8b-instruct), then same size, then same family, each by
    spelling; one spelling per name (aliases that differ only in '-' and '.' count once)."""
    size = set(_SIZE.findall(value))
    family = (_FAMILY.findall(value) or [""])[0]

    def tier(name: str) -> int:
        same_size = bool(size & set(_SIZE.findall(name)))
        same_family = bool(family) and name.startswith(family)
        return 0 if same_size and same_family else 1 if same_size else 2 if same_family else 3

    scored = []
    for name in choices:
        ratio = difflib.SequenceMatcher(None, value, name).ratio()
        t = tier(name)
        if t < 3 and ratio >= 0.4 or ratio >= 0.6:
            scored.append((t if ratio >= 0.4 else 3, -ratio, name))
    out, seen = [], set()
    for _, _, name in sorted(scored):
        key = name.replace("-", "").replace(".", "")
        if key not in seen:
            seen.add(key)
            out.append(name)
    return out[:n]


class ConfigError(KvplanError):
    """A config.json (or profile) that is malformed or misses a required field."""


def read_user_file(path: str | Path, what: str, max_bytes: int = 64 * 2**20) -> str:
    """A file the user named (scenario, result, ...), as text; any problem is one KvplanError line.
    Only regular files up to `max_bytes`: a FIFO would block forever and /dev/zero never ends."""
    p = Path(path)
    try:
        info = p.stat()
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise KvplanError(f"{p}: cannot read the {what}: {kind}")
        if info.st_size > max_bytes:
            raise KvplanError(f"{p}: the {what} is {info.st_size:,} bytes; the limit is {max_bytes:,}")
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KvplanError(f"{p}: no such {what} file") from None
    except (PermissionError, UnicodeDecodeError, OSError) as exc:
        raise KvplanError(f"{p}: cannot read the {what} ({type(exc).__name__})") from None
