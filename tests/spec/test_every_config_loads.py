"""Every config.json under tests/data and every bundled profile loads in `kvplan estimate`: exit 0, or
exit 2 with one readable line (never a traceback); the new hybrid profiles also with a GPU."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.cli import main
from kvplan.spec.profiles import model_names

DATA = Path(__file__).resolve().parents[1] / "data"
CONFIGS = sorted(DATA.rglob("config.json"))
HYBRID_PROFILES = ["qwen3-next-80b-a3b-thinking", "qwen3.5-27b", "qwen3.5-35b-a3b", "nemotron-h-56b-base-8k",
                   "nemotron-3-nano-30b-a3b", "llama-4-scout-17b-16e-instruct", "llama-4-maverick-17b-128e-instruct",
                   "ai21-jamba-1.5-mini", "falcon-mamba-7b"]


def _run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def _assert_clean(rc: int, out: str, err: str, what: str) -> None:
    assert rc in (0, 2), (what, rc, err[-2000:])
    assert "Traceback" not in err, what
    if rc == 0:
        json.loads(out)
    else:
        assert len(err.strip().splitlines()) == 1, (what, err)


def test_there_are_configs_to_check():
    assert len(CONFIGS) >= 50 and len(model_names()) >= 80


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.parent.name)
def test_every_test_config_loads(capsys, path):
    _assert_clean(*_run(capsys, "estimate", "--model", str(path), "--json"), str(path))


@pytest.mark.slow
def test_every_profile_loads(capsys):
    for name in model_names():
        _assert_clean(*_run(capsys, "estimate", "--model", name, "--json"), name)


@pytest.mark.parametrize("name", HYBRID_PROFILES)
def test_hybrid_profiles_plan_on_a_gpu(capsys, name):
    rc, out, err = _run(capsys, "estimate", "--model", name, "--gpu", "h100", "--tp", "8", "--json")
    _assert_clean(rc, out, err, name)
    data = json.loads(out)
    assert data["state_bytes_per_request"] >= 0 and data["kv_bytes_per_token"] >= 0
    assert data["num_parameters"] > 0 and data["vllm_block_size"] >= 16
