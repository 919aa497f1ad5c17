"""Where kvplan's data lives: the files bundled in the package, and the user's own.

Bundled (read-only, shipped in the wheel): model profiles (the repository's `profiles/`, installed as
`kvplan/profiles/`), scenarios (`scenarios/`, installed as `kvplan/scenarios/`), and under
`kvplan/data/` the GPU catalog (`gpus.yaml`), list prices, the GPU cost coefficients, CPU calibrations
and the smoke baseline. `$KVPLAN_DATA` points kvplan at another copy of that tree, whose profiles and
scenarios are `models/` and `scenarios/` in it.

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


def profiles_dir() -> Path:
    """The bundled model profiles (`profiles/*.yaml`)."""
    env = os.environ.get("KVPLAN_DATA")
    return Path(env) / "models" if env else Path(str(resources.files("kvplan.profiles")))


def scenarios_dir() -> Path:
    """The bundled scenarios (`scenarios/*.yaml`)."""
    env = os.environ.get("KVPLAN_DATA")
    return Path(env) / "scenarios" if env else Path(str(resources.files("kvplan.scenarios")))


def user_dir() -> Path:
    """Where kvplan writes what a user makes (calibrations); not created until written."""
    if os.environ.get("KVPLAN_HOME"):
        return Path(os.environ["KVPLAN_HOME"])
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kvplan"
