"""benchmarks/gpu_check.py on a machine without CUDA: the tiny model runs end to end and the
script names the checks that need a GPU."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_cpu_path_runs_and_lists_cuda_checks() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this test covers the CPU path")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--requests", "4",
                           "--max-model-len", "512"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "weights: measured" in proc.stdout and "burst of 4" in proc.stdout
    assert "needs CUDA (skipped here):" in proc.stdout and "vs kvplan predict" in proc.stdout
