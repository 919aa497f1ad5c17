"""Debian's headless chromium for the page tests (skipped where it is not installed)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def screenshot(tmp_path: Path, page: Path, width: int, height: int):
    """The page as chromium draws it: an (height, width, channels) array of floats in [0, 1]."""
    from matplotlib.image import imread

    png = tmp_path / (page.stem + ".png")
    proc = chromium(tmp_path, f"--screenshot={png}", f"--window-size={width},{height}", page.as_uri())
    assert png.exists(), proc.stderr[-2000:]
    return imread(str(png))
