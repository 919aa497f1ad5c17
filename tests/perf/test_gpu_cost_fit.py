"""The published-runs CSV read as cases (every row accounted for), and the fit machinery
recovering coefficients it generated the figures with."""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from gpu_cost_fit import Prepared, errors_pct, fit, prepare
from published_runs import Case, gpu_name, read_cases

from kvplan.perf.gpu_cost import Coefficients, fitted_coefficients


@pytest.fixture(scope="module")
def cases(reference_dir: Path) -> tuple[list, list]:
    return read_cases(reference_dir / "gpu-bench-calibration.csv")


def test_every_row_is_a_case_or_says_why_not(reference_dir: Path, cases: tuple[list, list]) -> None:
    import pandas as pd

    parsed, skipped = cases
    assert len(parsed) + len(skipped) == len(pd.read_csv(reference_dir / "gpu-bench-calibration.csv"))
    assert all(s.reason for s in skipped)
    assert len({c.row for c in parsed} | {s.row for s in skipped}) == len(parsed) + len(skipped)


def test_rows_parsed_as_they_are(cases: tuple[list, list]) -> None:
    by_row = {c.row: c for c in cases[0]}
    lambda_row = by_row[0]  # '0.5.4 (docker vllm/vllm-openai:v0.5.4 per repo scripts)', rate 'inf', ShareGPT means
    assert lambda_row.vllm_version == "0.5.4" and math.isinf(lambda_row.request_rate)
    assert (lambda_row.input_len, lambda_row.output_len) == (137, 194)  # tot_in=1369 tot_out=1945 over 10
    assert by_row[15].gpu_memory_utilization == 0.25 and by_row[15].kv_cache_tokens == 450192 and by_row[15].tp == 2
    assert by_row[15].output_len == round(458216 / 500)  # no --ignore-eos: the run's real output total
    assert any("main @ 2024-08-04" in a for a in by_row[95].assumptions) and by_row[95].vllm_version == "0.5.4"
    assert by_row[10].tp == 2 and any("tp not published" in a for a in by_row[10].assumptions)
    assert by_row[79].max_concurrency == 1 and by_row[83].engine == "sglang" and by_row[83].request_rate == 16


@pytest.mark.parametrize(("text", "name"), [("A100 80GB SXM", "a100-sxm4-80gb"), ("H100 80GB SXM", "h100-sxm-80gb"),
                                            ("H200 (form factor not stated)", "h200-sxm-141gb"),
                                            ("A100 SXM (memory size not stated)", "a100-sxm4-80gb"),
                                            ("A100 40GB PCIe", "a100-pcie-40gb"), ("TPU v5e", None)])
def test_gpu_names_map_to_the_catalog(text: str, name: str | None) -> None:
    assert gpu_name(text)[0] == name


def test_fit_recovers_coefficients_it_generated_the_figures_with(cases: tuple[list, list]) -> None:
    """Figures made by known coefficients on real rows' setups; a fit started elsewhere predicts them again."""
    truth = Coefficients(hbm_efficiency=0.8, gemm_efficiency=0.45, kv_efficiency=0.7, attention_efficiency=0.5,
                         step_overhead_s=0.003, legacy_step_overhead_s=0.012,
                         legacy_seq_overhead_s=2e-5, request_latency_s=0.01)
    by_row = {c.row: c for c in cases[0]}
    synthetic: list[Prepared] = []
    for row in (0, 3, 5, 8, 79, 81, 82, 95):
        p = prepare(by_row[row])
        assert isinstance(p, Prepared)
        thr, tpot_s, ttft_s = p.replay(truth).headline()
        case: Case = replace(p.case, output_tok_s=thr, mean_tpot_ms=tpot_s * 1e3 if p.case.mean_tpot_ms else None,
                             mean_ttft_ms=ttft_s * 1e3 if p.case.mean_ttft_ms else None)
        synthetic.append(replace(p, case=case))
    before = [abs(errors_pct(p, Coefficients())["err_output_tok_s"]) for p in synthetic]
    found = fit(synthetic, iterations=400)
    after = [abs(errors_pct(p, found)["err_output_tok_s"]) for p in synthetic]
    assert np.median(after) < 1.0 < np.median(before)


def test_stored_coefficients_carry_their_provenance() -> None:
    coeffs, meta = fitted_coefficients()
    assert meta["fitted_on"] and "gpu-bench-calibration.csv" in meta["source"] and meta["rows_fitted"] > 50
    assert 0 < coeffs.hbm_efficiency <= 1 and 0 < coeffs.gemm_efficiency <= 1
