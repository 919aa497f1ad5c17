"""Runs never destroy earlier ones: a new folder per run by default (with a `latest` link), and an
`--out` that holds a run is refused without --force; bundled scenarios by name."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvplan.cli import main
from kvplan.stress.scenario_loader import bundled_scenarios, load_scenario


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


@pytest.fixture()
def tiny(tmp_path: Path) -> Path:
    """ci-smoke cut to 6 requests: seconds, not tens of seconds."""
    data = load_scenario("ci-smoke").to_dict()
    data.update(name="tiny-smoke", num_requests=6, warmup_requests=0)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_default_output_is_a_new_folder_per_run(tiny: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _cli(capsys, "stress", "-s", str(tiny), "--no-progress")[0] == 0
    assert _cli(capsys, "stress", "-s", str(tiny), "--no-progress")[0] == 0
    runs = sorted(p for p in (tmp_path / "reports" / "tiny-smoke").iterdir() if p.name != "latest")
    assert len(runs) == 2 and all((r / "result.json").exists() and (r / "report.html").exists() for r in runs)
    latest = tmp_path / "reports" / "tiny-smoke" / "latest"
    assert latest.is_symlink() and latest.resolve() == runs[-1].resolve()


def test_out_with_an_earlier_run_needs_force(tiny: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "result-contiguous.json").write_text("{}")  # an earlier --allocator both run
    rc, _, err = _cli(capsys, "stress", "-s", str(tiny), "--out", str(out), "--no-progress")
    assert rc == 2 and "--force" in err and "result-contiguous.json" in err
    assert sorted(p.name for p in out.iterdir()) == ["result-contiguous.json"]  # nothing written
    rc, _, _ = _cli(capsys, "stress", "-s", str(tiny), "--out", str(out), "--no-progress", "--force")
    assert rc == 0 and sorted(p.name for p in out.iterdir()) == ["report.html", "result.json"]  # no stale file


def test_bundled_scenarios_by_name(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # outside the checkout: names, not paths
    assert {"ci-smoke", "mixed", "paged-vs-contiguous"} <= set(bundled_scenarios())
    for name in ("mixed", "mixed.yaml", "scenarios/mixed.yaml"):
        assert load_scenario(name).name == "mixed"
    rc, out, _ = _cli(capsys, "scenarios")
    assert rc == 0 and all(n in out for n in bundled_scenarios())
    rc, _, err = _cli(capsys, "stress", "-s", "nope", "--no-progress")
    assert rc == 2 and "nope" in err and "ci-smoke" in err


def test_scenario_name_cannot_escape_the_reports_folder(tmp_path: Path, capsys) -> None:
    data = load_scenario("ci-smoke").to_dict()
    for bad in ("/abs/dir/X", "../../X"):
        data["name"] = bad
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(data))
        rc, _, err = _cli(capsys, "stress", "-s", str(path), "--no-progress")
        assert rc == 2 and "name" in err


def test_two_runs_into_one_out_folder_do_not_overwrite(tiny: Path, tmp_path: Path) -> None:
    """A run finishing after another one wrote into the same --out is not saved over it: it goes to
    a temp folder, with one line saying so (issue 29: both used to exit 0, one lost)."""
    from kvplan.errors import KvplanError
    from kvplan.stress.stress_run import StressOptions, run_stress, save_run

    out = tmp_path / "shared-out"
    first = run_stress(StressOptions(tiny, out_dir=out, progress=False))
    second = run_stress(StressOptions(tiny, out_dir=out, progress=False))  # both started on an empty folder
    save_run(first)
    with pytest.raises(KvplanError, match="another run wrote result.json"):
        save_run(second)
    assert json.loads((out / "result.json").read_text())["created_at"] == first.results[0].created_at


def test_runs_started_together_get_their_own_folders(tiny: Path, tmp_path: Path, monkeypatch) -> None:
    from kvplan.stress.stress_run import StressOptions, run_stress

    monkeypatch.chdir(tmp_path)
    runs = [run_stress(StressOptions(tiny, progress=False)) for _ in range(3)]  # well within one second
    assert len({r.out_dir for r in runs}) == 3 and all(r.out_dir.is_dir() for r in runs)


def test_force_removes_only_what_a_run_writes(tiny: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "result-notes.json").write_text("{}")  # the user's, though it matches result-*.json
    (out / "result.json").write_text("{}")  # an earlier run's
    with pytest.raises(SystemExit) as info:
        main(["stress", "-s", str(tiny), "--out", str(out), "--force", "--no-progress"])
    assert info.value.code == 0, capsys.readouterr().err
    assert (out / "result-notes.json").read_text() == "{}"


def test_report_never_overwrites_its_input(tmp_path: Path, capsys) -> None:
    src = Path(__file__).resolve().parents[2] / "kvplan" / "data" / "baselines" / "ci-smoke.json"
    copy = tmp_path / "in.json"
    copy.write_bytes(src.read_bytes())
    with pytest.raises(SystemExit) as info:
        main(["report", str(copy), "-o", str(copy)])
    assert info.value.code == 2 and "an input of this command" in capsys.readouterr().err
    assert copy.read_bytes() == src.read_bytes()
