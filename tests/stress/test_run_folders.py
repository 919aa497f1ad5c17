"""Runs never destroy earlier ones: a new folder per run by default (with a `latest` link), and an
`--out` that holds a run is refused without --force; bundled scenarios by name."""
from __future__ import annotations

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
