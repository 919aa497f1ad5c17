"""Crashes and Ctrl-C never cost an earlier result: `kvplan stress` killed with SIGKILL at moments
spread over its whole run leaves result.json and report.html each either as they were or as the
new run wrote them (never truncated, never a temp file in their place); a real SIGINT writes the
partial result marked incomplete, even when a second one arrives while it is being saved; and
`files.write_files` (which result files, reports, baselines and gate outputs go through) killed
mid-write leaves every file whole, its temp files removed by the next write.

The kills run in forked children of tests/stress/crash_helper.py (one process pays the imports).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvplan.results.result import load_result
from kvplan.stress.scenario_loader import load_scenario

HELPER = Path(__file__).with_name("crash_helper.py")
FRACTIONS = [0.2, 0.5, 0.8, 0.95, 1.0, 1.02, 1.05, 1.1]  # of a complete run's duration; past 1: the save

pytestmark = pytest.mark.slow


def _helper(*args: str) -> dict:
    done = subprocess.run([sys.executable, str(HELPER), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture()
def tiny(tmp_path: Path) -> Path:
    data = load_scenario("ci-smoke").to_dict()
    data.update(name="tiny-smoke", num_requests=8, warmup_requests=0)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _old_run(tmp_path: Path) -> Path:
    """An earlier run's files, recognisable by their content."""
    old = tmp_path / "old"
    old.mkdir()
    (old / "result.json").write_text(json.dumps({"old": True}))
    (old / "report.html").write_text("<!doctype html><title>old</title></html>\n")
    return old


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_kill_9_at_any_moment_leaves_old_or_new_files(tiny: Path, tmp_path: Path) -> None:
    old = _old_run(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    report = _helper("kill", str(tiny), str(work), str(old), *map(str, FRACTIONS))
    assert report["complete_rc"] == 0
    assert (work / "complete" / "report.html").read_text().rstrip().endswith("</html>")
    assert load_result(work / "complete" / "result.json").complete
    seen = set()
    for i, attempt in enumerate(report["attempts"]):
        after = work / f"after-{i}"
        assert attempt["rc"] in (-9, 0), attempt  # killed, or finished just before the kill
        result_text, html = (after / "result.json").read_text(), (after / "report.html").read_text()
        if result_text == (old / "result.json").read_text():
            seen.add("old result")
        else:
            assert load_result(after / "result.json").complete, f"attempt {i}: result.json neither old nor whole"
            seen.add("new result")
        if html != (old / "report.html").read_text():  # else a new run's whole page (it differs only in times)
            assert html.rstrip().endswith("</html>") and "tiny-smoke" in html, (
                f"attempt {i}: report.html neither old nor whole"
            )
        # a temp file may survive a kill, but only under its hidden temp name, never as a result
        assert all(name.startswith(".") for name in _temps(after)), _temps(after)
        assert {p.name for p in after.iterdir() if not p.name.startswith(".")} == {"result.json", "report.html"}
    assert "old result" in seen  # the early kills found the earlier run intact


def test_the_next_run_removes_a_killed_runs_temp_files(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    # what a kill -9 during the save leaves: temp files named for a process that no longer runs
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for name in ("result.json", "report.html"):
        (out / f".{name}.{dead.pid}.x1y2.tmp").write_text("{half")
    from kvplan.cli import main

    with pytest.raises(SystemExit) as info:
        main(["stress", "-s", str(tiny), "--out", str(out), "--no-progress", "--force"])
    assert info.value.code == 0
    assert _temps(out) == [] and load_result(out / "result.json").complete


def test_sigint_writes_the_partial_result_even_when_pressed_twice(tiny: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    report = _helper("sigint", str(tiny), str(work))
    assert report["rc"] == 130  # an interrupted run never reads as a success
    out = work / "out"
    result = load_result(out / "result.json")
    assert not result.complete
    assert {"aborted", "ok"} <= {r.status for r in result.records()}
    assert (out / "report.html").read_text().rstrip().endswith("</html>")
    assert _temps(out) == []


def test_write_files_killed_mid_write_leaves_whole_files(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    delays = [0.05, 0.1, 0.2, 0.3, 0.5]
    report = _helper("write", str(work), *map(str, delays))
    for i in range(len(delays)):
        after = tmp_path / f"w-after-{i}"
        for name in ("a.bin", "b.bin"):
            data = (after / name).read_bytes()
            assert len(data) == 8 * 2**20 and data == bytes([data[0]]) * len(data), f"kill {i}: {name} is torn"
    assert report["final"] == ["a.bin", "b.bin"]  # the dead writers' temp files are gone
    assert (work / "a.bin").read_bytes() == b"done"


def test_a_run_that_cannot_be_saved_goes_to_a_temp_folder(tiny: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """The disk fills between the check and the save: the finished run is not lost: it is saved
    to a new temp folder, and the one error line (exit 2) says where."""
    import re

    import kvplan.stress.stress_run as view
    from kvplan.cli import main
    from kvplan.errors import KvplanError

    original = view.save_run

    def full_disk(run, extra=None, out_dir=None):
        if out_dir is None:  # where the user asked
            raise KvplanError(f"cannot write {run.out_dir / 'result.json'}: No space left on device")
        return original(run, extra, out_dir)

    monkeypatch.setattr(view, "save_run", full_disk)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    with pytest.raises(SystemExit) as info:
        main(["stress", "-s", str(tiny), "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and "No space left on device" in err[0], err
    saved = Path(re.search(r"saved it to (\S+) instead", err[0]).group(1))
    assert saved.parent == tmp_path and load_result(saved / "result.json").complete
    assert (saved / "report.html").read_text().rstrip().endswith("</html>")
    assert not (tmp_path / "out" / "result.json").exists()
