"""`kvplan baseline update RESULT.json`: store a result as its scenario's baseline, to be committed.

The file is validated first (a broken or interrupted result must never become the reference) and
copied byte for byte, atomically, to `reports/baselines/<scenario>.json`; contiguous-allocator
results go to `<scenario>.contiguous.json` so `--allocator both` keeps one baseline per allocator.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kvplan.errors import KvplanError
from kvplan.files import write_text_atomic
from kvplan.stress.result import RunResult, load_result

BASELINES_DIR = Path("reports") / "baselines"
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a scenario name is user text: no paths


@dataclass(frozen=True)
class BaselineUpdate:
    path: Path
    replaced: bool  # a previous baseline was overwritten
    previous_commit: str | None


def baseline_path(result: RunResult, baselines_dir: Path = BASELINES_DIR) -> Path:
    name = result.scenario_name
    if not _SAFE_NAME.fullmatch(name):
        raise KvplanError(f"scenario name {name!r} cannot be a file name; use letters, digits, '.', '_' and '-'")
    suffix = "" if result.allocator == "paged" else f".{result.allocator}"
    return Path(baselines_dir) / f"{name}{suffix}.json"


def update_baseline(result_path: str | Path, baselines_dir: str | Path = BASELINES_DIR) -> BaselineUpdate:
    source = Path(result_path)
    result = load_result(source)  # one-line KvplanError on a missing or malformed file
    if not result.complete:
        raise KvplanError(f"{source} is incomplete (interrupted or failed run); a baseline must be a complete run")
    target = baseline_path(result, Path(baselines_dir))
    previous, existed = None, target.exists()
    if existed:
        try:
            previous = load_result(target).environment.git_commit
        except KvplanError:
            previous = None  # a broken old baseline is simply replaced
    write_text_atomic(target, source.read_text(encoding="utf-8"))
    return BaselineUpdate(target, existed, previous)
