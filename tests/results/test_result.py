"""result.json: round trip, atomic writes, one-line errors for bad files."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pydantic_core
import pytest

from kvplan.errors import KvplanError
from kvplan.results.metrics import compute_metrics, compute_per_class_metrics
from kvplan.results.record import RequestRecord
from kvplan.results.result import RunResult, TimelineSample, collect_environment, git_commit, load_result
from kvplan.stress.scenario_loader import load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]


def _result(complete: bool = True) -> RunResult:
    scenario = load_scenario(ROOT / "scenarios" / "ci-smoke.yaml")
    records = [
        RequestRecord("req-000000", "short", 0.0, 0.2, (0.2, 0.25, 0.3), 0.3, 40, 3),
        RequestRecord("req-000001", "medium", 0.1, 0.5, (0.5, 0.6), 0.6, 200, 2),
        RequestRecord("req-000002", "short", 0.2, None, (), 0.4, 50, 0, status="aborted", error="interrupted"),
    ]
    return RunResult(
        scenario=scenario.to_dict(), environment=collect_environment(), allocator="paged",
        prediction={"num_gpu_blocks": 128, "peak_kv_bytes": 1_048_576, "p50_ttft_ms": 180.0},
        requests=[r.to_dict() for r in records], metrics=compute_metrics(records, scenario.slo),
        per_class=compute_per_class_metrics(records, scenario.slo),
        timeline=[TimelineSample(t_s=0.0, kv_bytes_used=0, kv_pool_bytes=4194304, running=0, waiting=3),
                  TimelineSample(t_s=0.1, kv_bytes_used=65536, kv_pool_bytes=4194304, running=2, waiting=1,
                                 preemptions=0, rss_bytes=123456789, engine_steps=4)],
        complete=complete, notes=["test"],
    )


def test_round_trip(tmp_path: Path) -> None:
    result = _result()
    path = result.write_atomic(tmp_path / "out" / "result.json")
    loaded = load_result(path)
    assert loaded == result
    assert loaded.records()[0].token_times_s == (0.2, 0.25, 0.3)
    assert loaded.timeline[1].model_extra == {"engine_steps": 4}  # newer counters survive
    assert parse_scenario(loaded.scenario).name == "ci-smoke"  # the stored scenario validates again
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1 and data["metrics"]["completed"] == 2
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]  # no temp files left


def test_partial_result_is_marked(tmp_path: Path) -> None:
    path = _result(complete=False).write_atomic(tmp_path / "result.json")
    assert load_result(path).complete is False


def test_nan_is_written_as_null(tmp_path: Path) -> None:
    result = _result()
    result.metrics["mean_ttft_ms"] = float("nan")
    path = result.write_atomic(tmp_path / "result.json")
    assert json.loads(path.read_text())["metrics"]["mean_ttft_ms"] is None


def test_failed_serialisation_leaves_no_file(tmp_path: Path) -> None:
    result = _result()
    result.prediction["bad"] = object()  # not JSON-serialisable
    target = tmp_path / "result.json"
    with pytest.raises(pydantic_core.PydanticSerializationError):
        result.write_atomic(target)
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = _result().write_atomic(tmp_path / "result.json")
    before = target.read_bytes()

    def boom(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    changed = _result(complete=False)
    with pytest.raises(KvplanError, match="disk full"):  # one line for the user, exit 2
        changed.write_atomic(target)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


@pytest.mark.parametrize("content, expected", [
    (None, "no such result file"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a kvplan result"),
    ('{"schema_version": 99}', "schema_version 99 is not supported"),
    ('{"schema_version": 1, "scenario": {}}', "environment"),
    ('{"schema_version": 1, "scenario": {}, "environment": {"python": "3", "platform": "x"}, "complete": "maybe"}',
     "complete"),
    ('{"schema_version": 1, "scenario": {}, "environment": {"python": "3", "platform": "x"}, "extra_field": 1}',
     "extra_field"),
])
def test_bad_result_files(tmp_path: Path, content: str | None, expected: str) -> None:
    path = tmp_path / "result.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(KvplanError) as info:
        load_result(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and expected in message, message


def test_environment_without_torch_import() -> None:
    env = collect_environment()
    assert env.python and env.platform and env.cpu_count
    assert env.git_commit is None or len(env.git_commit) == 40


def test_git_commit_reads_files(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "refs" / "heads" / "main").write_text("a" * 40 + "\n")
    (repo / "sub").mkdir()
    assert git_commit(repo / "sub") == "a" * 40
    (repo / ".git" / "refs" / "heads" / "main").unlink()
    (repo / ".git" / "packed-refs").write_text("# pack-refs\n" + "b" * 40 + " refs/heads/main\n")
    assert git_commit(repo) == "b" * 40
