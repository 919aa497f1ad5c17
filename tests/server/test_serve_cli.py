"""`kvplan serve` command line: flags, one-line errors, and no torch for `--help`."""
from __future__ import annotations

import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from kvplan.cli import app


def test_serve_has_vllm_flags() -> None:
    assert CliRunner().invoke(app, ["serve", "--help"]).exit_code == 0
    command = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    flags = {opt for p in command.params for opt in p.opts}
    for flag in ("--model", "--host", "--port", "--served-model-name", "--block-size", "--max-num-seqs",
                 "--max-num-batched-tokens", "--max-model-len", "--kv-cache-dtype", "--kv-cache-memory-bytes",
                 "--gpu-memory-utilization", "--enable-prefix-caching", "--device"):
        assert flag in flags


@pytest.mark.parametrize("args, word", [
    (["--model", "no-such-model"], "unknown model"),
    (["--model", "tiny-llama", "--port", "0"], "--port"),
])
def test_serve_user_errors_exit_2_in_one_line(args: list[str], word: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "kvplan", "serve", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and word in lines[0] and "Traceback" not in proc.stderr


def test_client_modules_do_not_import_torch() -> None:
    code = ("import sys, kvplan.cli, kvplan.stress.targets.openai_http, kvplan.stress.telemetry; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


@pytest.mark.parametrize("host, words", [("999.1.1.1", "does not resolve"), ("10.255.255.1", "cannot serve on")])
def test_an_address_that_cannot_be_served_is_one_line_before_serving(host: str, words: str) -> None:
    """Checked before the model loads or "serving on" is printed (it used to print that, then exit 3)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "kvplan", "serve", "--model", "tiny-llama", "--host", host],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and words in done.stderr and "serving" not in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
