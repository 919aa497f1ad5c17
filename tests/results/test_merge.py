"""Several hosts' results as one run (`kvplan report --merge`): records on one clock from each
host's start time, metrics recomputed from the merged samples (worked by hand below), server
figures from one host, and the refusals."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvplan.cli import main
from kvplan.errors import KvplanError
from kvplan.results.merge import merge_results
from kvplan.results.record import RequestRecord
from kvplan.results.result import RunResult, collect_environment, load_result


def _record(rid: str, arrival: float, first: float, last: float) -> RequestRecord:
    return RequestRecord(rid, "c", arrival, first, (first, last), last, 10, 2)


def _host(seed: int, started: float | None, records: list[RequestRecord], blocks: int, duration: float,
          url: str | None = "http://10.0.0.5:8000") -> RunResult:
    info = {"url": url, "started_unix_s": started} if url else {}
    return RunResult(scenario={"name": "chat", "seed": seed, "max_error_rate": 0.0}, environment=collect_environment(),
                     prediction={"mean_ttft_ms": 1.0}, requests=[r.to_dict() for r in records],
                     metrics={"duration": duration, "num_gpu_blocks": blocks, "prefix_hit_tokens": 7 * blocks},
                     server_info=info)


def _hosts(seed2: int = 2) -> list[RunResult]:
    one = _host(1, 1000.0, [_record("a", 0.0, 0.1, 0.2), _record("b", 0.5, 0.7, 0.8)], 100, 0.8)
    two = _host(seed2, 1000.5, [_record("a", 0.0, 0.3, 0.4), _record("b", 1.0, 1.1, 1.3)], 200, 1.3)
    return [one, two]


def test_records_on_one_clock_and_metrics_from_the_merged_samples() -> None:
    merged = merge_results(_hosts(), ["h1.json", "h2.json"])
    m = merged.metrics
    # host 2 started 0.5 s later: its requests arrive at 0.5 and 1.5, the last token at 1.8
    assert sorted((r["request_id"], r["arrival_s"]) for r in merged.requests) == [
        ("h1:a", 0.0), ("h1:b", 0.5), ("h2:a", 0.5), ("h2:b", 1.5)]
    assert m["num_requests"] == 4 and m["duration"] == pytest.approx(1.8)
    assert m["request_throughput"] == pytest.approx(4 / 1.8)
    # TTFTs 100, 200 (host 1) and 300, 100 ms (host 2): the median of the four samples is 150 ms, not
    # the mean of the hosts' medians (150 and 200: 175)
    assert m["mean_ttft_ms"] == pytest.approx(175.0) and m["median_ttft_ms"] == pytest.approx(150.0)
    assert m["max_concurrent_requests"] == 2  # h1:b [0.5, 0.8] overlaps h2:a [0.5, 0.9]
    # server figures from the longest run (host 2, 1.3 s), never summed
    assert m["num_gpu_blocks"] == 200 and m["prefix_hit_tokens"] == 1400
    assert merged.prediction == {} and merged.server_info["hosts"] == 2
    assert not any("same seed" in n for n in merged.notes)


def test_same_seeds_are_said_and_missing_start_times_are_taken_as_together() -> None:
    hosts = _hosts(seed2=1)
    notes = merge_results(hosts, ["h1.json", "h2.json"]).notes
    assert any("h1.json, h2.json ran with the same seed 1" in n for n in notes)
    no_start = [_host(1, None, [_record("a", 0.0, 0.1, 0.2)], 1, 0.2),
                _host(2, 5.0, [_record("a", 0.0, 0.1, 0.2)], 1, 0.2)]
    merged = merge_results(no_start, ["x", "y"])
    assert [r["arrival_s"] for r in merged.requests] == [0.0, 0.0]
    assert any("taken to have started together" in n for n in merged.notes)


def test_refusals() -> None:
    hosts = _hosts()
    with pytest.raises(KvplanError, match="two or more"):
        merge_results(hosts[:1], ["h1.json"])
    engine = _host(3, 1.0, [_record("a", 0.0, 0.1, 0.2)], 1, 0.2, url=None)
    with pytest.raises(KvplanError, match="e.json: a bundled-engine run"):
        merge_results([hosts[0], engine], ["h1.json", "e.json"])
    other = hosts[1].model_copy(update={"scenario": {"name": "other", "seed": 2}})
    with pytest.raises(KvplanError, match="scenario 'other', not 'chat'"):
        merge_results([hosts[0], other], ["h1.json", "h2.json"])


def test_report_merge_writes_the_merged_result_and_its_report(tmp_path: Path) -> None:
    paths = []
    for i, host in enumerate(_hosts(), 1):
        paths.append(tmp_path / f"h{i}.json")
        paths[-1].write_text(host.to_json())
    with pytest.raises(SystemExit) as info:
        main(["report", "--merge", *map(str, paths), "-o", str(tmp_path / "all" / "report.html")])
    assert info.value.code == 0
    merged = load_result(tmp_path / "all" / "result-merged.json")
    assert merged.metrics["num_requests"] == 4
    assert "<html" in (tmp_path / "all" / "report.html").read_text()[:200].lower()


@pytest.mark.timeout(120)
def test_two_hosts_against_one_server_merge_end_to_end(tmp_path: Path) -> None:
    from server_helpers import ThreadServer, faulty_app

    server = ThreadServer(faulty_app(0.0, []))
    server.start()
    try:
        for seed in (1, 2):  # the README's recipe: the same scenario, one seed per host
            with pytest.raises(SystemExit) as info:
                main(["stress", "--model", "tiny-llama", "--base-url", server.url, "--server-kind", "vllm",
                      "--num-prompts", "4", "--random-input-len", "8", "--random-output-len", "3", "--seed", str(seed),
                      "--max-concurrency", "2", "--out", str(tmp_path / f"host{seed}"), "--no-progress"])
            assert info.value.code == 0
    finally:
        server.stop()
    hosts = [load_result(tmp_path / f"host{s}" / "result.json") for s in (1, 2)]
    assert all(isinstance(h.server_info["started_unix_s"], float) for h in hosts)
    with pytest.raises(SystemExit) as info:
        main(["report", "--merge", *(str(tmp_path / f"host{s}" / "result.json") for s in (1, 2)),
              "-o", str(tmp_path / "merged" / "report.html")])
    assert info.value.code == 0
    merged = load_result(tmp_path / "merged" / "result-merged.json")
    assert merged.metrics["completed"] == 8 and merged.server_info["hosts"] == 2
    # the second host started after the first ended: the merged span covers both runs
    assert merged.metrics["duration"] >= max(h.metrics["duration"] for h in hosts)
