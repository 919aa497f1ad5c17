"""`kvplan sweep`: a vectorised grid equal, point by point, to the scalar plan (`plan_capacity`,
whose figures test_budget.py checks against real vLLM start-up logs)."""
from __future__ import annotations

import pytest

from kvplan.cli import main
from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.sweep import COLUMNS, sweep
from kvplan.spec.gpu import load_gpu
from kvplan.spec.profiles import load_model


@pytest.mark.parametrize("model", ["llama-3.1-8b-instruct", "gemma-3-27b-it", "gpt-oss-20b"])
def test_grid_matches_scalar_plan(model):
    spec = load_model(model)
    gpus = [load_gpu("h100"), load_gpu("l40s")]
    df = sweep(spec, ctx_tokens=[1000, 4096, 32768], concurrency=[1, 7, 64], kv_cache_dtypes=["auto", "fp8"],
               block_sizes=[16, 32], gpus=gpus)
    assert tuple(df.columns) == COLUMNS
    assert len(df) == 3 * 3 * 2 * 2 * 2
    for row in df.sample(12, random_state=0).itertuples():
        plan = plan_capacity(spec, EngineArgs(gpu=load_gpu(row.gpu), kv_cache_dtype=row.kv_cache_dtype,
                                              block_size=row.block_size, max_model_len=row.ctx))
        assert row.num_gpu_blocks == plan.num_gpu_blocks
        assert row.blocks_per_request == plan.blocks_per_request
        assert row.max_concurrency == pytest.approx(plan.max_concurrency)
        assert row.kv_cache_tokens == plan.kv_cache_tokens
        assert row.fits_one_request == plan.fits
        assert row.fits == (plan.fits and row.concurrency <= plan.max_concurrency)


def test_fp8_doubles_concurrency():
    df = sweep(load_model("llama-3.1-8b-instruct"), ctx_tokens=[8192], concurrency=[1], kv_cache_dtypes=["auto", "fp8"],
               block_sizes=[16], gpus=[load_gpu("h100")])
    auto, fp8 = df.sort_values("kv_cache_dtype")["num_gpu_blocks"].tolist()
    assert abs(fp8 - 2 * auto) <= 1


def test_cli_sweep_writes_csv_and_png(tmp_path, capsys):
    csv, png = tmp_path / "grid.csv", tmp_path / "grid.png"
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "sweep",
                "--model",
                "qwen2.5-7b-instruct",
                "--ctx",
                "2048,8192,32768",
                "--concurrency",
                "1,16",
                "--kv-cache-dtype",
                "auto,fp8",
                "--block-size",
                "16,32",
                "--gpu",
                "h100,a10",
                "--csv",
                str(csv),
                "--plot",
                str(png),
            ]
        )
    assert exc.value.code == 0
    import pandas as pd

    table = pd.read_csv(csv)
    assert len(table) == 3 * 2 * 2 * 2 * 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "max_concurrency" in capsys.readouterr().out


def test_cli_sweep_bad_list_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--model", "llama-2-7b", "--ctx", "4096,abc"])
    assert exc.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
