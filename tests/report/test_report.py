"""`kvplan report`: every section, self-contained, small, escaped; and a real-browser render."""
from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from browser import CHROMIUM, chromium

from kvplan.cli import main
from kvplan.errors import KvplanError
from kvplan.gate.agreement import error_pct
from kvplan.report.formatting import fmt
from kvplan.report.html import render_report, write_report
from kvplan.report.plots import decimate
from kvplan.results.result import RunResult

IMG_SRC = re.compile(r'<img src="([^"]*)"')


@pytest.fixture(scope="module")
def mixed_pair(result_factory) -> tuple[RunResult, RunResult]:
    """A mixed.yaml-sized run (~250 requests) with both allocators; the model name is hostile."""
    evil = "<script>alert(1)</script>"
    paged = result_factory(scenario_file="mixed.yaml", n_requests=256, model_name=evil, server_telemetry=True)
    contiguous = result_factory(scenario_file="mixed.yaml", n_requests=256, allocator="contiguous", model_name=evil)
    return paged, contiguous


@pytest.fixture(scope="module")
def mixed_html(mixed_pair, tmp_path_factory) -> Path:
    return write_report(list(mixed_pair), tmp_path_factory.mktemp("report") / "report.html")


def _images(html: str) -> list[bytes]:
    out = []
    for src in IMG_SRC.findall(html):
        assert src.startswith("data:image/svg+xml;base64,"), src[:60]
        out.append(base64.b64decode(src.split(",", 1)[1], validate=True))
    return out


def test_every_section_is_there(mixed_html: Path) -> None:
    html = mixed_html.read_text()
    for text in ("Paged vs contiguous: mixed", "mixed · paged", "mixed · contiguous",  # both allocators, side by side
                 "scenario", "model", "Engine settings", "max_num_batched_tokens", "Environment", "git commit",
                 "0123456789abcdef0123456789abcdef01234567", "Workload", "Cost model of the prediction",
                 "Prediction vs measurement", "error %", "KV memory over time",
                 "Running, waiting and preempted requests over time", "Latency distributions and percentiles per class",
                 "TTFT", "TPOT", "ITL", "E2E latency", "p99", "Throughput", "output_throughput",
                 "Goodput against the SLO", "good requests", "paged / contiguous", "Server"):
        assert text in html, text
    for key in ("fig-kv_memory", "fig-engine_load", "fig-latency_cdf", "fig-prediction_bars", "fig-prediction_ratio",
                "fig-allocators"):
        assert f'id="{key}"' in html, key
    # one KV figure, load figure and CDF per allocator, plus one comparison
    assert html.count('id="fig-kv_memory"') == 2 and html.count('id="fig-allocators"') == 1


def test_self_contained_and_small(mixed_html: Path) -> None:
    html = mixed_html.read_text()
    assert mixed_html.stat().st_size < 3_000_000
    assert not re.search(r'(src|href|action|srcset)\s*=\s*["\']?\s*(https?:)?//', html, re.I)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", html, re.I)  # no CSS fetches either
    # URLs may appear as text (server_info's url), never as an attribute value or a CSS url()
    assert all(html[m.start() - 1] not in "\"'=(" for m in re.finditer(r"https?://", html))
    assert "<script" not in html and "<link" not in html
    assert "default-src 'none'" in html  # the browser itself refuses to fetch anything


def test_user_text_is_escaped(mixed_html: Path) -> None:
    html = mixed_html.read_text()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_figures_are_valid_svg(mixed_html: Path) -> None:
    images = _images(mixed_html.read_text())
    assert len(images) == 1 + 2 * 5  # comparison + (ratios, bars, KV, load, CDF) per allocator
    for svg in images:
        root = ET.fromstring(svg)
        assert root.tag.endswith("svg") and float(root.get("width").rstrip("pt")) > 100
        assert len(svg) > 5_000  # real drawings, not empty canvases


def test_single_result_and_missing_parts(smoke_result: RunResult, tmp_path: Path) -> None:
    html = write_report([smoke_result], tmp_path / "r.html").read_text()
    assert "Paged vs contiguous" not in html and "ci-smoke · paged" in html
    bare = smoke_result.model_copy(deep=True)
    bare.timeline, bare.prediction, bare.per_class, bare.complete = [], {}, {}, False
    bare.scenario["slo"] = {"percentile": 99.0}
    html = render_report([bare])
    assert "INCOMPLETE" in html and "No engine counters" in html and "sets no SLO" in html


def test_server_fraction_without_pool(smoke_result: RunResult, result_factory) -> None:
    r = result_factory(server_telemetry=True)
    for d in (r.metrics, r.prediction):
        d.pop("kv_pool_bytes"), d.pop("num_gpu_blocks")
    r.timeline = []
    assert len(_images(render_report([r]))) == 5  # the server's fraction still draws, on its own axis


def test_duplicate_allocator_is_refused(smoke_result: RunResult) -> None:
    with pytest.raises(KvplanError, match="at most one per allocator"):
        render_report([smoke_result, smoke_result])
    with pytest.raises(KvplanError, match="no results"):
        render_report([])


def test_formatting_helpers() -> None:
    assert fmt(None) == "—" and fmt(4 * 2**20, "bytes") == "4.00 MiB" and fmt(32768, "bytes") == "32,768 B"
    assert fmt(0.25, "ratio") == "25.0%" and fmt(12.345, "ms") == "12.3 ms" and fmt(True) == "yes"
    assert (
        error_pct(110, 100) == pytest.approx(10.0)
        and error_pct(0, 0) == 0.0
        and error_pct(1, 0) is None
        and error_pct(0, 1) == -100.0
    )
    t, y = decimate(list(range(10_000)), [0] * 5000 + [7] + [0] * 4999, max_points=100)
    assert len(t) <= 100 and 7 in y  # the peak survives decimation


def test_cli_report(tmp_path: Path, capsys, mixed_pair) -> None:
    a = mixed_pair[0].write_atomic(tmp_path / "result-paged.json")
    b = mixed_pair[1].write_atomic(tmp_path / "result-contiguous.json")
    with pytest.raises(SystemExit) as exc:
        main(["report", str(a), str(b)])
    assert exc.value.code == 0 and "Paged vs contiguous" in (tmp_path / "report.html").read_text()
    with pytest.raises(SystemExit) as exc:
        main(["report", str(a), "-o", str(tmp_path / "out" / "one.html")])
    assert exc.value.code == 0 and (tmp_path / "out" / "one.html").exists()
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path / "bad.json")])
    assert exc.value.code == 2 and "not valid JSON" in capsys.readouterr().err


# --- a real browser ---------------------------------------------------------------------------
def _loaded_images(tmp_path: Path, html: str, name: str) -> str:
    """'loaded/total' images as Chromium sees them. The report forbids scripts (CSP), so a copy
    without the CSP gets a one-line probe; the report itself is rendered untouched below."""
    probe = (
        '<script>window.addEventListener("load", () => { const i = [...document.images]; document.body.setAttribute('
        '"data-img-check", i.filter(x => x.complete && x.naturalWidth > 0).length + "/" + i.length); '
        # each figure's id and its drawn size on the page: a figure that loads but lays out at 0 px fails too
        'document.body.setAttribute("data-fig-sizes", i.map(x => x.closest("figure").id + ":" + x.naturalWidth + "x" '
        '+ x.naturalHeight + ":" + Math.round(x.getBoundingClientRect().width) + "x" + '
        'Math.round(x.getBoundingClientRect().height)).join(" ")); '
        "});</script>"
    )
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html).replace("</body>", probe + "</body>")
    path = tmp_path / name
    path.write_text(page)
    proc = chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", path.as_uri())
    found = re.search(r'data-img-check="(\d+/\d+)"', proc.stdout)
    assert found, proc.stderr[-2000:]
    sizes = re.search(r'data-fig-sizes="([^"]*)"', proc.stdout)
    FIGURE_SIZES[name] = sizes.group(1).split() if sizes else []
    return found.group(1)


FIGURE_SIZES: dict[str, list[str]] = {}  # probe page -> ["fig-id:WxH:WxH" natural and on-page size per image]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_renders_in_a_real_browser(mixed_html: Path, tmp_path: Path) -> None:
    png = tmp_path / "report.png"
    proc = chromium(tmp_path, f"--screenshot={png}", "--window-size=1280,4000", mixed_html.as_uri())
    assert png.exists(), proc.stderr[-2000:]
    from matplotlib.image import imread

    pixels = imread(str(png))
    assert pixels.shape[0] == 4000 and pixels.shape[1] == 1280
    assert float(pixels[..., :3].std()) > 0.05  # not a blank page
    assert float(pixels[1500:4000, :, :3].std()) > 0.05  # the figures further down drew too
    html = mixed_html.read_text()
    n = len(IMG_SRC.findall(html))
    assert _loaded_images(tmp_path, html, "probe.html") == f"{n}/{n}"
    sizes = [item.split(":") for item in FIGURE_SIZES["probe.html"]]
    assert len(sizes) == n and {fig for fig, _, _ in sizes} == {
        "fig-allocators",
        "fig-prediction_ratio",
        "fig-prediction_bars",
        "fig-kv_memory",
        "fig-engine_load",
        "fig-latency_cdf",
    }
    for fig, natural, shown in sizes:  # each figure has pixels, natural and as laid out
        assert all(int(v) > 50 for v in natural.split("x") + shown.split("x")), (fig, natural, shown)
    # the probe can fail: one corrupt figure is reported as not loaded
    broken = IMG_SRC.sub('<img src="data:image/svg+xml;base64,bm90IGFuIHN2Zw=="', html, count=1)
    assert _loaded_images(tmp_path, broken, "broken.html") == f"{n - 1}/{n}"


def test_decimation_is_by_time_not_by_sample_index() -> None:
    """An engine samples every step; steps vary 100x in length. 9,000 samples in the first second and
    1,000 over the next 99 s: the kept points must still cover the whole run, and every peak survives."""
    import numpy as np

    t = np.concatenate([np.linspace(0, 1, 9000, endpoint=False), np.linspace(1, 100, 1000)])
    y = np.zeros_like(t)
    y[9500] = 17.0  # a burst late in the sparse part
    y[123] = -3.0  # a dip early in the dense part
    kept_t, kept_y = decimate(t, y, max_points=200)
    assert len(kept_t) <= 210 and 17.0 in kept_y and -3.0 in kept_y
    assert np.max(np.diff(kept_t)) <= 2 * 100 / 100 + 1e-9  # no gap wider than two time buckets


def test_predicted_timeline_thinning_keeps_the_peak() -> None:
    from kvplan.stress.prediction import _thin
    from kvplan.stress.simulate import SimSample

    samples = [SimSample(t_s=i * 0.001, kv_bytes_used=(10_000 if i == 4321 else i % 7), running=1, waiting=0,
                         preemptions=0, prefix_hit_tokens=0) for i in range(10_000)]
    thin = _thin(samples, limit=200)
    assert len(thin) <= 210 and max(s.kv_bytes_used for s in thin) == 10_000 and thin[-1] is samples[-1]


def test_predicted_timeline_thinning_keeps_queue_and_running_peaks_too() -> None:
    """A queue spike and a dip in running requests at moments when KV use is unremarkable."""
    from kvplan.stress.prediction import _thin
    from kvplan.stress.simulate import SimSample

    samples = [
        SimSample(
            t_s=i * 0.001,
            kv_bytes_used=1000 + i % 5,
            running=(0 if i == 777 else 8),
            waiting=(250 if i == 6001 else i % 3),
            preemptions=0,
            prefix_hit_tokens=0,
        )
        for i in range(10_000)
    ]
    thin = _thin(samples, limit=300)
    assert len(thin) <= 310
    assert max(s.waiting for s in thin) == 250 and min(s.running for s in thin) == 0
    assert max(s.kv_bytes_used for s in thin) == 1004 and min(s.kv_bytes_used for s in thin) == 1000
