"""The memory a stress run may take: the process's address-space limit, read as the kernel applies
it, and a run too big for it refused in one line before its requests are generated (issue 46: a
1,000,000-request scenario under a 3 GB cap)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.stress import stress_run
from kvplan.stress.scenario_loader import parse_scenario

SCENARIO = {"name": "big", "model": "tiny-llama", "num_requests": 1_000_000,
            "workload": {"classes": [{"name": "a", "prompt_tokens": 8, "output_tokens": 2}]},
            "arrival": {"type": "concurrency", "concurrency": 64}}


def test_headroom_is_the_address_space_limit_less_what_is_mapped() -> None:
    code = textwrap.dedent("""
        import resource
        from kvplan.stress.memory import headroom_bytes
        size = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (size + 300 * 2**20, resource.RLIM_INFINITY))
        print(headroom_bytes())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    room = int(out)
    assert 200 * 2**20 < room <= 300 * 2**20  # 300 MiB above what was mapped, less the little mapped since


def test_a_run_too_big_for_the_memory_left_is_refused_before_it_is_generated(monkeypatch) -> None:
    generated = []
    real = stress_run.Scenario.request_stream

    def counting(self, *args, **kwargs):
        for r in real(self, *args, **kwargs):
            generated.append(r)
            yield r

    monkeypatch.setattr(stress_run.Scenario, "request_stream", counting)
    monkeypatch.setattr("kvplan.stress.memory.headroom_bytes", lambda: 2 * 2**30)
    scenario = parse_scenario(SCENARIO, "test")
    with pytest.raises(KvplanError) as info:
        stress_run.scenario_requests(scenario, baseline_bytes=2**29)
    # 1,000,000 x (2,000 + 40 x 10 tokens) bytes + 0.5 GiB = 2.74 GiB > 2 GiB
    assert "1,000,000 requests of ~10 tokens need about 2.7 GiB" in str(info.value)
    assert "may take 2.0 GiB more" in str(info.value) and "\n" not in str(info.value)
    assert len(generated) <= stress_run.MEMORY_SAMPLE_REQUESTS + 1  # refused after the sample, not at the end
    monkeypatch.setattr("kvplan.stress.memory.headroom_bytes", lambda: 3 * 2**30)
    small = parse_scenario({**SCENARIO, "num_requests": 5000}, "test")
    assert len(stress_run.scenario_requests(small, baseline_bytes=2**29)) == 5000


@pytest.mark.slow  # imports torch under the cap: a few seconds
def test_the_million_request_scenario_under_a_3_gb_cap_is_one_line(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    code = (f"import resource; resource.setrlimit(resource.RLIMIT_AS, (3 * 10**9, resource.RLIM_INFINITY)); "
            f"from kvplan.cli import main; main(['stress', '--scenario', {str(path)!r}, '--out', "
            f"{str(tmp_path / 'out')!r}, '--no-progress'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and "need about" in done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
