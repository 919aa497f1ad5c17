"""Where kvplan's data lives: the files bundled in the package, and the user's own.

Bundled (read-only, shipped in the wheel under `kvplan/data/`): model profiles (`models/*.yaml`),
the GPU catalog (`gpus.yaml`), scenarios (`scenarios/*.yaml`) and CPU calibrations
(`calibration/*.yaml`). `$KVPLAN_DATA` points kvplan at another copy of that tree.

The user's (written by `kvplan calibrate`): `$KVPLAN_HOME`, else `$XDG_DATA_HOME/kvplan`, else
`~/.local/share/kvplan`; read before the bundled files, so a user's calibration wins.
"""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path


def bundled_dir() -> Path:
    """The package's `data/` folder (a real directory: pip installs wheels unpacked)."""
    env = os.environ.get("KVPLAN_DATA")
    return Path(env) if env else Path(str(resources.files("kvplan") / "data"))


def user_dir() -> Path:
    """Where kvplan writes what a user makes (calibrations); not created until written."""
    if os.environ.get("KVPLAN_HOME"):
        return Path(os.environ["KVPLAN_HOME"])
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kvplan"
