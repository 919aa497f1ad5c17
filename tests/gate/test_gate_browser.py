"""The gate's HTML verdict in a real browser (Debian's chromium): it draws, and it says what the
console table and the JSON say, with the same signed prediction error."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import CHROMIUM, chromium, screenshot

from kvplan.gate.checks import run_gate
from kvplan.report.gate_view import gate_html
from kvplan.results.result import RunResult


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_gate_page_renders_the_verdict(smoke_result: RunResult, tmp_path: Path) -> None:
    off = smoke_result.model_copy(deep=True)
    off.prediction["peak_kv_bytes"] = int(smoke_result.metrics["peak_kv_bytes"] * 1.05)  # the prediction 5% high
    verdict = run_gate(smoke_result, off)
    page = tmp_path / "gate.html"
    page.write_text(gate_html(verdict, baseline_where="baseline.json", result_where="result.json"))
    pixels = screenshot(tmp_path, page, 1280, 1600)
    assert pixels.shape[:2] == (1600, 1280) and float(pixels[..., :3].std()) > 0.05  # not a blank page
    dom = chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    text = re.sub(r"<[^>]+>", " ", dom)
    assert "FAIL" in text and "peak_kv_bytes" in text
    (check,) = verdict.failures
    assert f"{check.delta_pct:+.1f}%" in text  # the error the table, the plot and --json print: +5.0%
