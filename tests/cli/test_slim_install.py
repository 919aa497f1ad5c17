"""`pip install kvplan` without the [engine] extra (no torch, no transformers): the planner, predict,
gate, report and stress --target work; the engine's commands say which extra to install, in one line.
Simulated in a child process where importing torch or transformers fails as it would if absent."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_ENGINE = """
import sys
for name in ("torch", "transformers"):
    sys.modules[name] = None  # `import torch` now raises ModuleNotFoundError, as in a slim install
sys.argv = ["kvplan", *sys.argv[1:]]
from kvplan.__main__ import run
run()
"""
BASELINE = str(ROOT / "kvplan" / "data" / "baselines" / "ci-smoke.json")


def _kvplan(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_ENGINE, *args], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)


def test_the_engine_is_an_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"])
    assert "torch" not in base and "transformers" not in base
    assert {"torch", "transformers"} <= {
        d.split(">")[0].split("=")[0].split("[")[0] for d in project["optional-dependencies"]["engine"]
    }


@pytest.mark.parametrize(
    "args",
    [
        ["estimate", "--model", "llama-2-7b", "--gpu", "h100"],
        ["predict", "--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--num-prompts", "20"],
        ["gate", "--baseline", BASELINE, "--result", BASELINE],
        ["report", BASELINE, "-o", "r.html"],
    ],
)
def test_the_planner_and_the_gate_run_without_the_engine(tmp_path: Path, args: list[str]) -> None:
    done = _kvplan(tmp_path, *args)
    assert done.returncode == 0, done.stderr[-1000:]


@pytest.mark.parametrize(
    "args", [["stress", "--scenario", "ci-smoke", "--out", "run"], ["serve", "--model", "tiny-llama"], ["calibrate"]]
)
def test_the_engines_commands_name_the_extra(tmp_path: Path, args: list[str]) -> None:
    done = _kvplan(tmp_path, *args)
    err = done.stderr.strip()
    assert done.returncode == 2 and "pip install 'kvplan[engine]'" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists()
