"""The fuzz suite's harness: run `kvplan` in-process on generated arguments and files, in a fresh
workspace, and check what every run must satisfy whatever its input:

- no exception escapes `kvplan.cli.main` (a traceback is a bug), only `SystemExit`;
- the exit code is 0, 1 or 2, and 1 only where it means "regression" (`kvplan gate`);
- on exit 2, one `kvplan: error:` line and nothing written in the workspace;
- commands that would start the engine (stress, calibrate, serve) stop where the engine would be
  built (`EngineReached`), and by then have written nothing either.
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import shutil
import sys
import tempfile
import traceback
import types
from collections import Counter
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import yaml
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "kvplan" / "data" / "baselines" / "ci-smoke.json"
# deterministic by default (the same cases every run, so a failure reproduces); KVPLAN_FUZZ_SEED=random
# draws new ones, KVPLAN_FUZZ_SCALE=10 runs ten times as many
FUZZ = settings(derandomize=os.environ.get("KVPLAN_FUZZ_SEED") != "random", database=None, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.filter_too_much, HealthCheck.data_too_large])
CASES: Counter[str] = Counter()  # generated cases run, by kind (printed at the end of the session)


def scale() -> float:
    """KVPLAN_FUZZ_SCALE=10 runs ten times as many cases (a longer local hunt)."""
    return float(os.environ.get("KVPLAN_FUZZ_SCALE", "1"))


def examples(n: int) -> int:
    return max(1, int(n * scale()))


class EngineReached(BaseException):  # not an Exception: kvplan's last-resort handler must let it through
    """Raised where `kvplan stress` / `calibrate` / `serve` would build the engine: the input passed validation."""


def _reached(*args: object, **kwargs: object) -> None:
    raise EngineReached


def engine_stops(monkeypatch) -> None:
    """Patch every door to the engine (and to a server) so fuzzed commands stop before it; request
    streams are cut to 64 requests (their validation and sampling still run)."""
    import kvplan.stress.calibrate as calibrate
    import kvplan.stress.scenario as scenario
    import kvplan.stress.stress_run as command

    monkeypatch.setattr(command, "_make_target", _reached)
    monkeypatch.setattr(calibrate, "calibrate", _reached)
    monkeypatch.setattr(calibrate, "calibrate_scenario", _reached)
    original = scenario.iter_requests
    monkeypatch.setattr(scenario, "iter_requests", lambda *a, **k: islice(original(*a, **k), 64))
    # `kvplan serve` checks its flags, then imports the server (and torch) and starts it: a stand-in
    # module stops it there without paying the torch import
    stand_in = types.ModuleType("kvplan.server.serve")
    stand_in.serve = _reached  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kvplan.server.serve", stand_in)


@dataclass
class Workspace:
    root: Path

    def __truediv__(self, name: str) -> Path:
        return self.root / name


@functools.cache
def _tiny_config_text() -> str:
    from kvplan.spec.profiles import model_profile

    return json.dumps(model_profile("tiny-llama")["config"])


def tiny_config() -> dict:
    return json.loads(_tiny_config_text())


@functools.cache
def _scenario_text() -> str:
    from kvplan.stress.scenario_loader import load_scenario

    return yaml.safe_dump(load_scenario("ci-smoke").to_dict())


@contextlib.contextmanager
def workspace():
    """A fresh folder (also the working directory) holding valid and hostile inputs."""
    root = Path(tempfile.mkdtemp(prefix="kvplan-fuzz-"))
    old = os.getcwd()
    try:
        (root / "adir").mkdir()
        (root / "afile.txt").write_text("not json\n")
        os.mkfifo(root / "fifo")
        shutil.copy(BASELINE, root / "result.json")
        (root / "reports" / "baselines").mkdir(parents=True)
        shutil.copy(BASELINE, root / "reports" / "baselines" / "ci-smoke.json")  # `gate` without --baseline finds it
        (root / "model").mkdir()
        (root / "model" / "config.json").write_text(_tiny_config_text())
        (root / "scenario.yaml").write_text(_scenario_text())
        os.chdir(root)
        # the user's data folder (calibrations) inside the workspace too, so a write there is seen
        home, os.environ["KVPLAN_HOME"] = os.environ.get("KVPLAN_HOME"), str(root / "kvplan-home")
        try:
            yield Workspace(root)
        finally:
            if home is None:
                os.environ.pop("KVPLAN_HOME", None)
            else:
                os.environ["KVPLAN_HOME"] = home
    finally:
        os.chdir(old)
        shutil.rmtree(root, ignore_errors=True)


def snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            out[str(p.relative_to(root))] = (
                "d" if p.is_dir() else "f",
                st.st_size,
                0 if p.is_dir() else st.st_mtime_ns,
            )
    return out


@dataclass
class Outcome:
    rc: int | None  # None: stopped where the engine would start
    out: str
    err: str


def invoke(ws: Workspace, args: list[str], kind: str = "cli") -> Outcome:
    """Run `kvplan ARGS` in-process and check the invariants in the module doc."""
    from kvplan.cli import main

    CASES[kind] += 1
    before = snapshot(ws.root)
    out, err = io.StringIO(), io.StringIO()
    rc: int | None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(list(args))
        rc = 0
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except EngineReached:
        rc = None
    except BaseException:  # noqa: BLE001 - any other escape is the bug this suite hunts
        raise AssertionError(f"traceback from kvplan {args!r}:\n{traceback.format_exc()}") from None
    outcome = Outcome(rc, out.getvalue(), err.getvalue())
    where = f"kvplan {args!r} -> {rc}; stderr: {outcome.err[-400:]!r}"
    assert "Traceback" not in outcome.err, where
    assert rc in (None, 0, 1, 2), where
    if rc == 1:
        assert args and args[0] == "gate", f"exit 1 means a gated regression, only `kvplan gate` has one: {where}"
    if rc in (None, 2):
        assert snapshot(ws.root) == before, (
            f"files written although {'the engine was not reached' if rc == 2 else 'before the engine'}: {where}"
        )
    if rc == 2:
        errors = [line for line in outcome.err.splitlines() if line.startswith("kvplan: error:")]
        assert len(errors) == 1 and len(errors[0]) < 2000, where
    return outcome
