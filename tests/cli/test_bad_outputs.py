"""Bad output paths and out-of-range numbers, as issue 14 listed them: each is one
`kvplan: error:` line naming the bad value, exit 2, and nothing written (no CSV left behind by a
plot that then failed, no temp file, no folder created)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kvplan.cli import main

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "kvplan" / "data" / "baselines" / "ci-smoke.json"
BIG = str(2**64)
LONG = "x" * 5000

CASES = [
    (["sweep", "-m", "tiny-llama", "--ctx", BIG], BIG),
    (["sweep", "-m", "tiny-llama", "--concurrency", BIG], BIG),
    (["sweep", "-m", "tiny-llama", "--block-size", BIG], BIG),
    (["sweep", "-m", "tiny-llama", "--ctx", "1024,0"], "--ctx"),
    (["sweep", "-m", "tiny-llama", "--csv", "adir"], "adir"),
    (["sweep", "-m", "tiny-llama", "--csv", "afile.txt/x.csv"], "afile.txt"),
    (["sweep", "-m", "tiny-llama", "--csv", "/dev/full"], "/dev/full"),
    (["sweep", "-m", "tiny-llama", "--csv", "ok.csv", "--plot", "x.unknownext"], ".unknownext"),
    (["sweep", "-m", "tiny-llama", "--csv", "ok.csv", "--plot", "adir"], "adir"),
    (["sweep", "-m", "tiny-llama", "--csv", "ok.csv", "--plot", "/dev/full"], "/dev/full"),
    (["sweep", "-m", "tiny-llama", "--plot", "/proc/kvplan/x.png"], "/proc/kvplan"),
    (["report", "result.json", "-o", "adir"], "adir"),
    # writing onto an input, however spelt: once `newdir/../result.json` replaced the result with HTML
    (["report", "result.json", "-o", "newdir/../result.json"], "an input of this command"),
    (["report", "result.json", "-o", "./adir/../result.json"], "an input of this command"),
    (["report", "result.json", "-o", "link.html"], "an input of this command"),
    (["gate", "-r", "result.json", "-b", "result.json", "--html", "newdir/../result.json"], "an input of this command"),
    (["gate", "-r", "result.json", "-b", "result.json", "--junit", "link.html"], "an input of this command"),
    (["gate", "-r", "result.json", "-b", "result.json", "--junit", "adir"], "adir"),
    (["gate", "-r", "result.json", "-b", "result.json", "--html", "adir"], "adir"),
    (["gate", "-r", "result.json", "-b", "result.json", "--junit", "ok.xml", "--html", "adir"], "adir"),
    # a device or FIFO that fails is written before the regular files are renamed in: nothing is left
    (
        ["gate", "-r", "result.json", "-b", "result.json", "--html", "ok.html", "--junit", "fifo"],
        "no process is reading",
    ),
    (["gate", "-r", "result.json", "-b", "result.json", "--html", "ok.html", "--junit", "/dev/full"], "/dev/full"),
    (["baseline", "update", "result.json", "--dir", "afile.txt"], "afile.txt"),
    (["baseline", "update", "result.json", "--dir", "/dev/null"], "/dev/null"),
    (["profiles", "show", LONG], "unknown model"),
    (["estimate", "-m", LONG], "x" * 20),
    (["calibrate", "--device", LONG, "--out", "c.yaml"], "not a device"),
]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("args,needle", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_output_or_number_is_one_line_exit_2_nothing_written(args: list[str], needle: str, tmp_path: Path,
                                                                 capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile.txt").write_text("x\n")
    os.mkfifo(tmp_path / "fifo")  # nobody reads it
    shutil.copy(BASELINE, tmp_path / "result.json")
    (tmp_path / "link.html").symlink_to("result.json")
    before = _tree(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(args)
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvplan: error:") and len(lines[0]) <= 1020, err[:500]
    assert needle in lines[0]
    assert _tree(tmp_path) == before  # nothing written, not even the CSV of a sweep whose plot failed
    assert not os.path.exists("/proc/kvplan")
