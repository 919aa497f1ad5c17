"""Writing result files: atomically, so a reader never sees half of one."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Temp file beside `path`, fsync, `os.replace`: readers see the old file or the whole new one.
    Shared by result.json, report.html, JUnit XML and baselines."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp makes 0600 files; reports and baselines are shared, so keep the old file's mode or use 0644
        os.chmod(tmp, stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
