"""`kvplan baseline update RESULT.json`: store a result as its scenario's baseline, to be committed.

The file is validated first (a broken or interrupted result must never become the reference) and
gated: against the baseline it would replace (or, for a first baseline, against its own prediction);
a result that fails its gate is refused unless `force`. It is then copied byte for byte, atomically, to
`reports/baselines/<scenario>.json`; contiguous-allocator
results go to `<scenario>.contiguous.json` so `--allocator both` keeps one baseline per allocator.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kvplan.errors import KvplanError
from kvplan.files import write_text_atomic
from kvplan.gate.checks import run_gate
from kvplan.results.result import RunResult, load_result

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


def bundled_baseline(result: RunResult) -> Path | None:
    """The baseline kvplan ships for a bundled scenario (`kvplan/data/baselines/`), if any: `kvplan
    gate` from a wheel works on ci-smoke with no baseline of the user's."""
    from kvplan.spec.catalog_files import bundled_dir

    path = baseline_path(result, bundled_dir() / "baselines")
    return path if path.is_file() else None


def create_baseline(result_path: str | Path, baselines_dir: str | Path = BASELINES_DIR, *, force: bool = False,
                    allow_failed: bool = False) -> BaselineUpdate:
    """`kvplan baseline create`: any complete result becomes its scenario's first baseline, whatever
    its prediction said (a run the planner got wrong is still the reference the next runs compare
    with); an existing baseline is kept unless `force` (that is `update`'s job, which gates)."""
    source = Path(result_path)
    result = load_result(source)
    if not result.complete:
        raise KvplanError(f"{source} is incomplete (interrupted run); a baseline must be a complete run")
    if result.verdict == "failed" and not allow_failed:
        raise KvplanError(
            f"{source} is a failed run ({result.metrics.get('failed')} of {result.metrics.get('num_requests')} "
            "requests failed): a gate against it would pass failures; pass --allow-failed to store it anyway"
        )
    target = baseline_path(result, Path(baselines_dir))
    if target.exists() and not force:
        raise KvplanError(f"{target} exists; `kvplan baseline update {source}` replaces it after gating the new run "
                          "against it, or pass --force to overwrite it")
    existed = target.exists()
    write_text_atomic(target, source.read_text(encoding="utf-8"))
    return BaselineUpdate(target, existed, None)


def _refuse_failing(source: Path, result: RunResult, old: RunResult | None, target: Path) -> None:
    """A result that fails the gate it would have to pass never silently becomes the reference."""

    against = old if old is not None and old.scenario_name == result.scenario_name else result
    verdict = run_gate(against, result, baseline_where=str(target) if against is old else "its own prediction",
                       result_where=str(source))
    if not verdict.passed:
        failed = ", ".join(c.metric for c in verdict.failures[:5])
        where = f"the current baseline {target}" if against is old else "its own prediction"
        raise KvplanError(f"{source} fails its gate against {where} ({failed}); rerun it, or pass --force to make it "
                          "the baseline anyway")


def update_baseline(result_path: str | Path, baselines_dir: str | Path = BASELINES_DIR, *,
                    force: bool = False, allow_failed: bool = False) -> BaselineUpdate:
    source = Path(result_path)
    result = load_result(source)  # one-line KvplanError on a missing or malformed file
    if not result.complete:
        raise KvplanError(f"{source} is incomplete (interrupted or failed run); a baseline must be a complete run")
    if result.verdict == "failed" and not allow_failed:
        raise KvplanError(
            f"{source} is a failed run ({result.metrics.get('failed')} of {result.metrics.get('num_requests')} "
            "requests failed): a gate against it would pass failures; pass --allow-failed to store it anyway"
        )
    target = baseline_path(result, Path(baselines_dir))
    old, existed = None, target.exists()
    if existed:
        try:
            old = load_result(target)
        except KvplanError:
            old = None  # a broken old baseline is simply replaced
    if not force:
        _refuse_failing(source, result, old, target)
    previous = old.environment.git_commit if old is not None else None
    write_text_atomic(target, source.read_text(encoding="utf-8"))
    return BaselineUpdate(target, existed, previous)
