"""vllm bench serve's --plot-timeline and --plot-dataset-stats (vllm/benchmarks/plot.py, 0.19.1):
gaps coloured by the two thresholds as vLLM's construct_timeline_data does (< first: green, < second:
orange, else red), and both files written beside the vLLM result file as vLLM names them."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from kvplan.cli import main as cli_main
from kvplan.report.bench_plots import itl_segments
from kvplan.results.record import RequestRecord


def test_gaps_take_vllm_s_colours_and_runs_of_one_colour_merge() -> None:
    # token times 1.000, 1.010 (10 ms), 1.020 (10 ms), 1.060 (40 ms), 1.160 (100 ms), 1.170 (10 ms)
    times = (1.0, 1.01, 1.02, 1.06, 1.16, 1.17)
    record = RequestRecord("r", "c", 0.5, times[0], times, 1.17, 10, len(times))
    got = itl_segments(record, (25.0, 50.0))
    assert [(round(a, 3), round(b, 3), k) for a, b, k in got] == [
        (1.0, 1.02, 0), (1.02, 1.06, 1), (1.06, 1.16, 2), (1.16, 1.17, 0)]
    assert [k for *_, k in itl_segments(record, (5.0, 9.0))] == [2]  # every gap above both: one red bar


def test_stress_writes_both_plots_beside_the_vllm_result(tmp_path: Path) -> None:
    data = tmp_path / "ic" / "data" / "train-00000-of-00001.jsonl"
    data.parent.mkdir(parents=True)
    data.write_text("".join(json.dumps({"input": f"def f{i}(): pass", "instruction": "add a docstring"}) + "\n"
                            for i in range(4)))
    with pytest.raises(SystemExit) as info:
        cli_main(["stress", "--model", "tiny-llama", "--dataset-name", "hf", "--dataset-path", str(data.parents[1]),
                  "--hf-name", "likaixin/InstructCoder", "--hf-output-len", "3", "--num-prompts", "4",
                  "--max-concurrency", "2", "--plot-timeline", "--timeline-itl-thresholds", "1", "2",
                  "--plot-dataset-stats", "--result-dir", str(tmp_path / "res"), "--result-filename", "bench.json",
                  "--out", str(tmp_path / "out"), "--no-progress"])
    assert info.value.code == 0
    vllm = json.loads((tmp_path / "res" / "bench.json").read_text())
    assert vllm["num_prompts"] == 4 and vllm["output_lens"] == [3] * 4
    page = (tmp_path / "res" / "bench.timeline.html").read_text()
    assert "4 measured requests" in page and "thresholds 1 and 2 ms" in page
    svg = base64.b64decode(page.split("data:image/svg+xml;base64,")[1].split("'")[0])
    assert svg.startswith(b"<?xml") and b"</svg>" in svg
    assert (tmp_path / "res" / "bench.dataset_stats.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
