"""The report's verdict, table colours and figures agree with the result's numbers: a deliberate
latency miss, a slow machine, a wrong model, an interrupted run; timelines keep every peak and
share one clock; the latency bars are readable at 3 ms and 1,500 ms at once."""
from __future__ import annotations

import html as htmllib
import re
from typing import Any

import numpy as np
import pytest

from kvplan.gate.agreement import agreements
from kvplan.report import agreement_plot, plots
from kvplan.report.html import render_report
from kvplan.report.verdict import build_verdict, pretty
from kvplan.results.result import RunResult, TimelineSample
from kvplan.stress.machine_speed import normalized_errors

TIMING = (
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_e2el_ms",
)


def _slowed(result_factory, speed: float, itl_model_error: float = 1.0) -> RunResult:
    """A run on a machine `speed`x slower than calibrated: every predicted time is measured / speed,
    except median ITL, whose model is also off by `itl_model_error` (1.0: not off)."""
    r = result_factory().model_copy(deep=True)
    for key in TIMING:
        r.prediction[key] = r.metrics[key] / speed
    r.prediction["median_itl_ms"] /= itl_model_error
    r.prediction["duration_s"] = r.metrics["duration"] / speed
    r.prediction["output_throughput"] = r.metrics["output_throughput"] * speed
    r.metrics["machine_speed_ratio"] = speed
    r.normalized_error_pct = normalized_errors(r.prediction, r.metrics, speed)
    return r


def _table_rows(page: str) -> dict[str, tuple[str, list[str]]]:
    """The prediction table's rows by figure label: (css class, cells)."""
    table = page[page.index('<table class="agreement">'):]
    table = table[:table.index("</table>")]
    out = {}
    for cls, body in re.findall(r'<tr(?: class="(\w+)")?>(.*?)</tr>', table, re.S):
        cells = [htmllib.unescape(c) for c in re.findall(r"<td>(.*?)</td>", body, re.S)]
        if cells:
            out[cells[1]] = (cls, cells)
    return out


def test_a_deliberate_latency_miss_is_named_and_coloured(result_factory) -> None:
    r = _slowed(result_factory, speed=3.0, itl_model_error=3.0)  # slow machine, and a 3x ITL model error
    rows = {row.label: row for row in agreements(r)}
    assert r.normalized_error_pct["median_itl_ms"] == pytest.approx(-200 / 3)
    assert rows["median_itl_ms at measured speed"].status == "miss"
    assert rows["mean_ttft_ms at measured speed"].status == "pass"
    assert all(rows[k].status == "miss" for k in TIMING)  # raw: everything 3x off
    assert all(row.status == "pass" for row in rows.values() if row.kind == "memory" and row.judged)

    verdict = build_verdict(r)
    assert verdict.status == "fail" and "missed" in verdict.headline
    assert "3.0x slower than calibrated" in verdict.text
    assert "median ITL -67%" in verdict.text and "the machine's speed explains part of it, the model" in verdict.text
    # every "X within N%" the verdict states is a passing row whose error rounds to N
    by_name = {pretty(row.key): row for row in agreements(r) if row.kind == "timing at measured speed"}
    stated = re.findall(r"((?:mean|median|p\d+) \w+|output throughput|duration) within (\d+)%", verdict.text)
    assert stated
    for name, pct in stated:
        assert by_name[name].status == "pass" and round(abs(by_name[name].error_pct)) == int(pct)

    page = render_report([r])
    table = _table_rows(page)
    assert (
        table["median_itl_ms at measured speed"][0] == "fail"
        and table["median_itl_ms at measured speed"][1][-1] == "MISS"
    )
    assert table["mean_ttft_ms at measured speed"][0] == "pass"
    assert table["peak_kv_bytes"][0] == "pass" and table["median_itl_ms"][0] == "fail"
    assert all(cells[5].startswith("±") for _, cells in table.values())  # every row has a tolerance
    assert '<div class="verdict fail"' in page and "3.0x slower than calibrated" in htmllib.unescape(page)


def test_console_table_and_verdict_agree_with_the_report(result_factory) -> None:
    from rich.console import Console

    from kvplan.report.stress_view import render_agreement

    r = _slowed(result_factory, speed=3.0, itl_model_error=3.0)
    console = Console(record=True, width=160, color_system="truecolor")
    render_agreement(console, r)
    text = console.export_text(clear=False)
    assert (
        "at measured speed (±25%)" in text and "verdict: missed" in text and build_verdict(r).text.split(".")[0] in text
    )
    line = next(ln for ln in text.splitlines() if "median_itl_ms" in ln)
    assert "-66.7%" in line and "-88.9%" in line  # at measured speed, and raw (3x machine, 3x model)
    html = console.export_html(inline_styles=True).splitlines()

    def colours(key: str) -> list[str]:  # the colours of a row's cells, left to right
        return re.findall(r'<span style="color: (#[0-9a-f]{6})', next(ln for ln in html if f"{key} " in ln))

    red, green = "#800000", "#008000"
    assert colours("median_itl_ms")[-2:] == [red, red]  # missed raw, missed at measured speed
    assert colours("mean_ttft_ms")[-2:] == [red, green]  # missed raw, within at measured speed
    assert colours("peak_kv_bytes")[-1:] == [green]


def test_verdict_quotes_a_tolerance_only_when_the_rows_share_it(result_factory) -> None:
    r = result_factory(
        scenario_file="mixed.yaml", n_requests=64
    )  # its gate sets some timing tolerances, defaults the rest
    timing = {row.tolerance_pct for row in agreements(r) if row.kind == "timing" and row.judged}
    assert len(timing) > 1
    assert f"within their tolerances (±{min(timing):g}% to ±{max(timing):g}%)" in build_verdict(r).text


def test_a_slow_machine_alone_is_blamed_on_the_machine(result_factory) -> None:
    verdict = build_verdict(_slowed(result_factory, speed=2.4))
    assert "2.4x slower than calibrated" in verdict.text
    assert "Likely cause: the machine's speed, not the model." in verdict.text
    assert "mean TTFT within 0%" in verdict.text


def test_a_slightly_wrong_model_on_a_slow_machine(result_factory) -> None:
    verdict = build_verdict(_slowed(result_factory, speed=3.0, itl_model_error=1.4))  # ITL -29% at measured speed
    assert "median ITL -29%" in verdict.text and "mostly the machine's speed; the model is a little off" in verdict.text


def test_a_wrong_model_on_a_calibrated_machine_is_blamed_on_the_model(result_factory) -> None:
    verdict = build_verdict(_slowed(result_factory, speed=1.0, itl_model_error=3.0))
    assert "at its calibrated speed" in verdict.text and "not the machine" in verdict.text
    assert "median ITL" in verdict.headline or "median ITL" in verdict.text


def test_a_held_prediction_says_so(result_factory) -> None:
    r = _slowed(result_factory, speed=1.0)
    verdict = build_verdict(r)
    assert verdict.status == "pass" and verdict.headline == "prediction held"
    assert all(row.status == "pass" for row in agreements(r) if row.judged)


def test_an_interrupted_run_reads_incomplete_not_infinite(result_factory) -> None:
    r = result_factory().model_copy(deep=True)
    r.complete = False
    r.metrics.update(duration=0.003, output_throughput=float("inf"), request_throughput=float("inf"))
    r.prediction.update(duration_s=0.5, output_throughput=1381.0)
    rows = {row.label: row for row in agreements(r)}
    assert rows["num_gpu_blocks"].status == "pass"  # the pool layout does not depend on how far the run got
    assert rows["duration"].status == "incomplete" and rows["peak_kv_bytes"].status == "incomplete"
    page = htmllib.unescape(render_report([r]))
    assert "∞" not in page and "inf " not in page and not re.search(r"\+\d{4,}(\.\d)?%", page)
    assert "interrupted" in build_verdict(r).text
    assert _table_rows(render_report([r]))["output_throughput"][1][3] == "not measured"


def test_contiguous_section_says_its_own_allocator(result_factory) -> None:
    r = result_factory(allocator="contiguous").model_copy(deep=True)
    r.scenario["engine"]["allocator"] = "paged"  # what `--allocator both` stores: the scenario as written
    page = htmllib.unescape(render_report([r]))
    settings = page[page.index("Engine settings"):page.index("Environment")]
    assert re.search(r"<td>allocator</td><td>contiguous \(this run", settings)
    assert "max_concurrent_requests (vLLM's name) counts requests in flight" in page


# --- figures ------------------------------------------------------------------------------------
@pytest.fixture
def drawn(monkeypatch) -> list[Any]:
    """The matplotlib figures the report would inline, captured before rendering."""
    figures: list[Any] = []

    def capture(fig, key, *args, **kwargs):
        figures.append(fig)
        return plots.InlineFigure(key, "data:", "")

    monkeypatch.setattr(plots, "inline_figure", capture)
    monkeypatch.setattr(agreement_plot, "inline_figure", capture)
    return figures


def _line(ax, label_start: str) -> tuple[np.ndarray, np.ndarray]:
    line = next(ln for ln in ax.get_lines() if str(ln.get_label()).startswith(label_start))
    return np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)


def _envelope_kept(t: np.ndarray, y: np.ndarray, drawn_t: np.ndarray, drawn_y: np.ndarray, width: float) -> bool:
    """Every sample has a drawn point at least as high (and one at least as low) within `width`."""
    order = np.argsort(drawn_t)
    dt, dy = drawn_t[order], drawn_y[order]
    lo, hi = np.searchsorted(dt, t - width, "left"), np.searchsorted(dt, t + width, "right")
    return all(
        hi_i > lo_i and dy[lo_i:hi_i].max() >= v and dy[lo_i:hi_i].min() <= v for lo_i, hi_i, v in zip(lo, hi, y)
    )


def test_timeline_plots_keep_every_peak(result_factory, drawn) -> None:
    """30,000 steps, dense at the start and sparse later (steps vary in length): 25 one-sample KV
    spikes and waiting-queue bursts must all be drawn where they happened, and every other sample's
    height is within one time bucket (1/600 of the run, about a pixel) of a drawn point as high."""
    r = result_factory().model_copy(deep=True)
    rng = np.random.default_rng(3)
    t = np.sort(np.concatenate([rng.uniform(0, 2, 27_000), rng.uniform(2, 40, 3_000)]))
    kv = rng.integers(10, 20, t.size) * 32_768
    waiting = rng.integers(0, 3, t.size)
    # spikes at least 2 buckets apart, half of them in the dense first 2 s
    spike_t = np.concatenate([np.linspace(0.1, 1.9, 12), np.linspace(3, 39, 13)])
    spikes = np.searchsorted(t, spike_t)
    kv[spikes] = (100 + np.arange(25)) * 32_768
    waiting[spikes] = 50 + np.arange(25)
    r.timeline = [TimelineSample(t_s=float(a), kv_bytes_used=int(b), running=4, waiting=int(c), preemptions=0)
                  for a, b, c in zip(t, kv, waiting)]
    plots.kv_memory_figure(r)
    plots.engine_load_figure(r)
    kv_t, kv_mib = _line(drawn[0].axes[0], "measured")
    w_t, w = _line(drawn[1].axes[0], "waiting (measured)")
    assert kv_t.size < t.size / 10  # it did thin
    for i in spikes:
        assert (kv_t == t[i]).any() and kv_mib[kv_t == t[i]][0] == pytest.approx(kv[i] / 2**20)
        assert (w_t == t[i]).any() and w[w_t == t[i]][0] == waiting[i]
    bucket = (t.max() - t.min()) / (plots.MAX_POINTS // 2)
    assert _envelope_kept(t, kv / 2**20, kv_t, kv_mib, bucket) and _envelope_kept(
        t, waiting.astype(float), w_t, w, bucket
    )


def test_predicted_timeline_is_on_the_runs_clock(result_factory, drawn) -> None:
    r = result_factory().model_copy(deep=True)
    for s in r.prediction["timeline"]:
        s["t_s"] /= 20.0  # the simulation ran on a clock 20x faster than this machine
    clock = plots.clock_map(r)
    assert clock.factor == pytest.approx(r.timeline[-1].t_s / r.prediction["timeline"][-1]["t_s"])
    plots.kv_memory_figure(r)
    measured_t, _ = _line(drawn[0].axes[0], "measured")
    predicted_t, _ = _line(drawn[0].axes[0], "predicted")
    assert predicted_t.max() == pytest.approx(measured_t.max())
    assert "simulated clock x" in str(next(ln for ln in drawn[0].axes[0].get_lines()
                                           if str(ln.get_label()).startswith("predicted")).get_label())


def test_latency_bars_show_3_ms_beside_1500_ms(drawn) -> None:
    plots.prediction_bars_figure([plots.BarRow("itl", 3.0, 9.0, "ms"), plots.BarRow("e2el", 1500.0, 1400.0, "ms")])
    ax = drawn[0].axes[0]
    assert ax.get_yscale() == "log"
    low, high = ax.get_ylim()
    heights = sorted(p.get_height() for p in ax.patches)
    # on the log axis the 3 ms bar takes a visible share of the height (on a linear one: 3/1500 = 0.2%)
    assert (np.log(heights[0]) - np.log(low)) / (np.log(high) - np.log(low)) > 0.05


def test_ratio_bars_band_and_colours(result_factory, drawn) -> None:
    assert agreement_plot.band(25.0) == pytest.approx((0.75, 1.25))  # |predicted / measured - 1| <= 25%
    rows = agreements(_slowed(result_factory, speed=3.0, itl_model_error=2.0))
    agreement_plot.ratio_figure(rows)
    ax = drawn[0].axes[0]
    assert ax.get_xscale() == "log"
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [
        row.label for row in rows if row.judged and agreement_plot.predicted_over_measured(row) is not None
    ]
    dots = {str(i): ln.get_color() for i, ln in enumerate(ax.get_lines()) if ln.get_marker() == "o"}
    judged = [row for row in rows if row.judged and agreement_plot.predicted_over_measured(row) is not None]
    assert list(dots.values()) == [
        agreement_plot.PASS if row.status == "pass" else agreement_plot.MISS for row in judged
    ]
    # one signed error everywhere: each bar's label is the table's error, and the axis reads in it too
    texts = [t.get_text() for t in ax.texts]
    assert texts == [f"{row.error_pct:+.1f}%" for row in judged if row.error_pct is not None]
    assert agreement_plot._error_label(0.115) == "-88.5%" and agreement_plot._error_label(1.0) == "0"


def test_failure_lines_print_the_servers_words_not_markup() -> None:
    """Each error line is red text: no literal `[red]` tags, and a server's `[/b]` is not markup."""
    from types import SimpleNamespace

    from rich.console import Console

    from kvplan.report.stress_view import render_failure

    console = Console(record=True, width=200, force_terminal=False)
    run = SimpleNamespace(metrics={"failed": 2, "num_requests": 5}, allocator="paged",
                          errors=["http 500: boom [/b] [Errno 111]", "timeout: 5 s"])
    render_failure(console, run)  # type: ignore[arg-type]
    text = console.export_text()
    assert "[red]" not in text and "http 500: boom [/b] [Errno 111]" in text and "FAILED (paged)" in text


def test_the_verdict_tallies_each_kind_in_one_line(result_factory) -> None:
    held, slow = build_verdict(result_factory()), build_verdict(_slowed(result_factory, speed=3.0, itl_model_error=3.0))
    assert held.status == "pass" and held.tally.endswith("within tolerance")
    judged = {part.split()[0]: part.split()[1] for part in held.tally.removesuffix(" within tolerance").split(", ")}
    assert all(a == b for a, b in (v.split("/") for v in judged.values()))  # every judged figure held
    timing_ok, timing_all = next(p for p in slow.tally.split(", ") if p.startswith("timing")).split()[1].split("/")
    assert int(timing_ok) < int(timing_all)  # the slowed run's timing misses show in the tally
