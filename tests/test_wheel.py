"""The built wheel works on its own: model profiles, the GPU catalog, scenarios and calibrations
travel inside it, and kvplan runs from a directory that is not the checkout."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the slow lane (pytest -m slow): .ci/run runs it after the default lane

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """`pip wheel .` then the wheel installed (not editable) into a folder of its own. Under
    pytest-xdist the workers share one build (two builds of one tree at once trip over build/)."""
    import fcntl

    tmp = tmp_path_factory.mktemp("wheel")
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "kvplan-wheel"
    shared.mkdir(exist_ok=True)
    with open(shared / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not list((shared / "dist").glob("kvplan-*.whl")):
            # built from a copy: a build writes build/ and *.egg-info beside the sources, never into the checkout
            import shutil

            source = shared / "source"
            shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
                ".venv", ".git", "build", "*.egg-info", ".*_cache", ".hypothesis", "reports", "__pycache__"))
            subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                            "-q", "-w", str(shared / "dist")], check=True, cwd=tmp, capture_output=True)
    (wheel,) = (shared / "dist").glob("kvplan-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("kvplan/py.typed", "kvplan/data/gpus.yaml", "kvplan/profiles/llama-2-7b.yaml",
                   "kvplan/scenarios/ci-smoke.yaml", "kvplan/data/calibration/ci-smoke-cpu.yaml",
                   "kvplan/report/templates/report.html.j2"):
        assert needed in names, needed
    for folder in ("profiles", "scenarios"):  # every bundled profile and scenario travels
        missing = [p.name for p in (ROOT / folder).glob("*.yaml") if f"kvplan/{folder}/{p.name}" not in names]
        assert not missing, (folder, missing)
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    return site


def _kvplan(site: Path, cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # the installed copy first on sys.path, ahead of the editable checkout; run from outside the checkout
    code = (f"import sys; sys.path.insert(0, {str(site)!r}); import kvplan; "
            f"assert kvplan.__file__.startswith({str(site)!r}), kvplan.__file__; "
            f"from kvplan.cli import main; main({list(args)!r})")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "KVPLAN_HOME": str(cwd / "home"), **(env or {})}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_wheel_estimate_and_gpus(installed: Path, tmp_path: Path) -> None:
    out = _kvplan(installed, tmp_path, "estimate", "--model", "llama-2-7b", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["kv_bytes_per_token"] == 524_288  # 2 x 32 layers x 32 heads x 128 x 2 B
    out = _kvplan(installed, tmp_path, "gpus", "--json")
    assert out.returncode == 0, out.stderr
    assert "h100-sxm-80gb" in out.stdout and len(json.loads(out.stdout)) > 10


def test_wheel_runs_a_bundled_scenario(installed: Path, tmp_path: Path) -> None:
    out = _kvplan(
        installed, tmp_path, "stress", "--scenario", "ci-smoke", "--no-progress", "--out", str(tmp_path / "run")
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["metrics"]["num_gpu_blocks"] == result["prediction"]["num_gpu_blocks"] == 128
    assert "calibrated: ci-smoke-cpu.yaml" in result["prediction"]["cost_model_source"]  # the bundled calibration
    assert (tmp_path / "run" / "report.html").exists()


def test_wheel_resolves_hugging_face_ids(installed: Path, tmp_path: Path) -> None:
    """A bundled profile by the id users type into `vllm serve`, and a model only in a (fake) HF cache."""
    from hf_cache import FAKE_ID, MAIN_SHA, QWEN3_8B, QWEN3_8B_KV_BYTES_PER_TOKEN, put

    by_id = _kvplan(installed, tmp_path, "estimate", "--model", "meta-llama/Llama-2-7b-hf", "--json")
    assert by_id.returncode == 0, by_id.stderr
    assert json.loads(by_id.stdout)["kv_bytes_per_token"] == 524_288
    cache = tmp_path / "hf-cache"
    put(cache, FAKE_ID, MAIN_SHA, {"config.json": QWEN3_8B.read_text()})
    cached = _kvplan(installed, tmp_path, "estimate", "--model", FAKE_ID, "--json", env={"HF_HUB_CACHE": str(cache)})
    assert cached.returncode == 0, cached.stderr
    assert json.loads(cached.stdout)["kv_bytes_per_token"] == QWEN3_8B_KV_BYTES_PER_TOKEN
