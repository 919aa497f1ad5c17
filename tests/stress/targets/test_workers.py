"""`kvplan stress --target URL --workers N`: N processes, one run on one clock, every request once,
percentiles over every sample; the deal of requests and concurrency by hand."""
from __future__ import annotations

import numpy as np
import pytest
from server_helpers import ThreadServer, faulty_app, specs

from kvplan.errors import KvplanError
from kvplan.stress.targets.workers import deal, run_http_workers


def test_deal_by_hand() -> None:
    reqs = specs(7, gap_s=None)
    shares = deal(reqs, 3, 5)  # requests 0,3,6 / 1,4 / 2,5; concurrency 5 = 2 + 2 + 1
    assert [[r.index for r in rs] for rs, _ in shares] == [[0, 3, 6], [1, 4], [2, 5]]
    assert [c for _, c in shares] == [2, 2, 1]
    assert [c for _, c in deal(reqs, 4, 2)] == [1, 1]  # never a worker without a request in flight
    assert len(deal(specs(2), 8, None)) == 2  # nor more workers than requests
    assert sum(len(rs) for rs, _ in deal(reqs, 4, 2)) == 7  # and no request is dropped


@pytest.fixture(scope="module")
def server():
    s = ThreadServer(faulty_app(0.0, []))
    s.start()
    yield s
    s.stop()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("gap_s, concurrency", [(None, 6), (0.005, None)])
def test_two_workers_give_one_run(server, gap_s: float | None, concurrency: int | None) -> None:
    reqs = specs(40, output_tokens=3, gap_s=gap_s, ids=[f"ok-{i}" for i in range(40)])
    seen: list[int] = []
    out = run_http_workers(reqs, 2, seen.append, url=server.url, timeout_s=30.0, concurrency=concurrency,
                           server_kind="vllm", scrape_interval_s=0.2)
    assert [r.request_id for r in out.records] == [r.request_id for r in reqs]  # each once, in request order
    assert out.errors == {} and out.complete and out.server_info["workers"] == 2
    assert all(r.status == "ok" and r.output_tokens == 3 for r in out.records)
    # one clock: every worker counts from the same start, so an open loop's sends keep their spacing
    if gap_s is not None:
        sends = np.array([r.arrival_s for r in out.records])
        planned = np.array([r.arrival_s for r in reqs])
        assert np.all(sends >= planned - 1e-3)  # none sent before its time on the shared clock
    assert out.telemetry, "the first worker scraped /metrics"
    assert seen and seen[-1] <= 40


def test_workers_without_a_target_is_one_line(tmp_path, capsys) -> None:
    from kvplan.cli import main

    with pytest.raises(SystemExit) as info:
        main(["stress", "-s", "ci-smoke", "--workers", "2", "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--workers applies to a server" in err and err.count("\n") == 1


def test_bad_worker_count() -> None:
    with pytest.raises(KvplanError, match="--workers must be in 1..256"):
        run_http_workers(specs(2), 0, url="http://127.0.0.1:9")
