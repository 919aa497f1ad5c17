"""vLLM memory budget and KV layout.

Expected values come only from real vLLM: the calibration rows of logged start-ups (through the
`reference_dir` fixture: copies in tests/data/reference), a worked example logged by vLLM 0.19.0 for
Llama-3.1-8B-Instruct on an H100-80GB, and the wording of vLLM's start-up errors.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import replace

import pytest
from startup_log_replay import load_calibration

from kvplan.cli import main
from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.spec.gpu import custom_gpu, load_gpu
from kvplan.spec.profiles import load_model
from kvplan.units import GIB


@pytest.fixture(scope="module")
def rows(reference_dir):
    return load_calibration(reference_dir / "vllm-calibration.csv")


def _usable(rows):
    return [r for r in rows if r.skip_reason is None]


def test_calibration_rows_skipped_are_only_the_v0_excerpts(rows):
    """vllm-calibration.csv rows 11-12 (PR #10511, V0) log no tokens/blocks, dtype or max_model_len."""
    skipped = {r.index for r in rows if r.skip_reason}
    assert skipped == {11, 12}
    assert len(_usable(rows)) == 10


def test_layout_exact_given_logged_kv_memory(rows):
    """Acceptance 'layout exact': with --kv-cache-memory-bytes = the row's logged 'Available KV cache
    memory' (two decimals of GiB), blocks/tokens/concurrency match the row to that rounding: the
    reported figure lies between the predictions at logged -/+ 0.005 GiB (vllm-calibration.csv)."""
    for row in _usable(rows):
        spec = row.spec()
        lo = plan_capacity(spec, row.args(kv_cache_memory_bytes=row.logged_kv_bytes(-0.005)))
        mid = plan_capacity(spec, row.args(kv_cache_memory_bytes=row.logged_kv_bytes()))
        hi = plan_capacity(spec, row.args(kv_cache_memory_bytes=row.logged_kv_bytes(+0.005)))
        blocks = int(row.raw["reported_gpu_blocks"])
        tokens = int(row.raw["reported_kv_tokens"])
        conc = float(row.raw["reported_max_concurrency"])
        assert lo.num_gpu_blocks <= blocks <= hi.num_gpu_blocks, row.index
        assert lo.kv_cache_tokens <= tokens <= hi.kv_cache_tokens, row.index
        assert tokens == blocks * 16  # 0.19.0 token line: num_blocks x block_size
        assert round(lo.max_concurrency, 2) - 0.01 <= conc <= round(hi.max_concurrency, 2) + 0.01, row.index
        assert abs(mid.num_gpu_blocks - blocks) / blocks < 2e-4, row.index


def test_end_to_end_kv_tokens_within_acceptance(rows):
    """Acceptance: from GPU total, utilization, TP, dtype, KV dtype, max_model_len and version only,
    median |error| of KV tokens <= 2% and every row within 5% (vllm-calibration.csv rows 1-10)."""
    errors = []
    for row in _usable(rows):
        plan = row.plan()
        reported = int(row.raw["reported_kv_tokens"])
        errors.append(abs(plan.kv_cache_tokens - reported) / reported)
        assert plan.fits and plan.error is None
    assert statistics.median(errors) <= 0.02
    assert max(errors) <= 0.05


def test_components_track_the_logged_components(rows):
    """Each modelled component against the row's logged value (vllm-calibration.csv): weights and
    non-torch within 0.1 GiB, activation within 0.05 GiB."""
    for row in _usable(rows):
        plan = row.plan()
        assert abs(plan.weights_bytes / GIB - row.f("weights_gib")) < 0.1, row.index
        assert abs(plan.activation_bytes / GIB - row.f("activation_gib")) < 0.05, row.index
        assert abs(plan.non_torch_bytes / GIB - row.f("non_torch_gib")) < 0.1, row.index
        assert not plan.cudagraph_subtracted  # 0.19.0: estimate logged but not subtracted


def test_available_kv_memory_is_the_logged_budget(rows):
    """vLLM's "Available KV cache memory" is what is left of util x total after weights, the
    profiled activation, non-torch memory (NCCL buffers: ~2 GiB from TP 2) and, since 0.21, CUDA
    graphs. Every calibration row within 0.1 GiB of the logged figure (logged to 0.01 GiB): leaving
    out any one term moves it by 0.24 GiB or more."""
    for row in _usable(rows):
        logged = row.f("available_kv_gib")
        assert abs(row.plan().available_kv_cache_bytes / GIB - logged) < 0.1, (row.index, logged)


def _llama31_8b_h100(**changes):
    """vLLM 0.19.0's worked example: Llama-3.1-8B-Instruct bf16, total 79.19 GiB, util 0.90, with the
    measured components (weights 14.99, activation 1.89, non-torch 0.25 GiB)."""
    spec = load_model("llama-3.1-8b-instruct")
    total = 79.19 * GIB
    comp = {"weights": 14.99, "activation": 1.89, "non_torch": 0.25, "cudagraph": 0.0, "tp": 1, "kv": "auto"}
    comp.update(changes)
    available = int(total * 0.90) - round(
        (comp["weights"] + comp["activation"] + comp["non_torch"] + comp["cudagraph"]) * GIB
    )
    args = EngineArgs(gpu=custom_gpu(79.19), kv_cache_memory_bytes=available, tensor_parallel_size=comp["tp"],
                      kv_cache_dtype=comp["kv"], max_model_len=131072, vllm_version="0.19.0")
    return spec, args, available


def test_worked_example_base():
    """vLLM logs 54.14 GiB, 27,720 blocks, 443,520 tokens, 54.14x @ 8K, 3.38x @ 128K."""
    spec, args, available = _llama31_8b_h100()
    plan = plan_capacity(spec, args)
    assert f"{available / GIB:.2f}" == "54.14"
    assert plan.block_bytes == 2 * 2**20
    assert plan.num_gpu_blocks == 27_720
    assert plan.kv_cache_tokens == 443_520
    assert f"{plan.max_concurrency:.2f}" == "3.38"
    at_8k = plan_capacity(spec, replace(args, max_model_len=8192))
    assert f"{at_8k.max_concurrency:.2f}" == "54.14"


def test_worked_example_variants():
    """Variants of the worked example: fp8 KV -> 55,440 blocks / 887,040 tokens; v0.21+ graph
    estimate 0.84 GiB -> 27,290 blocks / 436,640 tokens; TP=2 -> 61,236 blocks of 1 MiB / 979,776."""
    spec, args, _ = _llama31_8b_h100(kv="fp8")
    fp8 = plan_capacity(spec, args)
    assert (fp8.num_gpu_blocks, fp8.kv_cache_tokens) == (55_440, 887_040)
    spec, args, _ = _llama31_8b_h100(cudagraph=0.84)
    g = plan_capacity(spec, args)
    assert (g.num_gpu_blocks, g.kv_cache_tokens) == (27_290, 436_640)
    spec, args, available = _llama31_8b_h100(tp=2, weights=7.51, non_torch=2.07)
    t2 = plan_capacity(spec, args)
    assert f"{available / GIB:.2f}" == "59.80"
    assert t2.block_bytes == 2**20
    assert (t2.num_gpu_blocks, t2.kv_cache_tokens) == (61_236, 979_776)


def test_worked_example_end_to_end_from_the_gpu_alone():
    """Same example without the measured components: kvplan's own budget (vLLM 0.19.0 behaviour)
    must land within 1% of the logged figures (54.14 GiB, 27,720 blocks)."""
    plan = plan_capacity(load_model("llama-3.1-8b-instruct"), EngineArgs(gpu=load_gpu("h100"), vllm_version="0.19.0"))
    assert abs(plan.num_gpu_blocks - 27_720) / 27_720 < 0.01
    assert plan.max_num_seqs == 1024 and plan.max_num_batched_tokens == 8192  # vLLM defaults on a >= 70 GiB device


def test_cudagraph_term_by_version_and_eager():
    """vLLM subtracts the CUDA-graph estimate from v0.21 on, never with --enforce-eager."""
    spec = load_model("llama-3.1-8b-instruct")
    base = EngineArgs(gpu=load_gpu("h100"))
    old = plan_capacity(spec, replace(base, vllm_version="0.19.0"))
    new = plan_capacity(spec, replace(base, vllm_version="0.21.0"))
    eager = plan_capacity(spec, replace(base, vllm_version="0.21.0", enforce_eager=True))
    assert not old.cudagraph_subtracted and new.cudagraph_subtracted and not eager.cudagraph_subtracted
    assert eager.cudagraph_bytes == 0
    assert new.available_kv_cache_bytes == old.available_kv_cache_bytes - new.cudagraph_bytes
    assert eager.available_kv_cache_bytes == old.available_kv_cache_bytes


def test_pool_does_not_depend_on_max_model_len():
    """vLLM V1 logs an identical pool at 2K..32K; only concurrency changes."""
    spec = load_model("llama-3.1-8b-instruct")
    plans = [plan_capacity(spec, EngineArgs(gpu=load_gpu("h100"), max_model_len=n, vllm_version="0.19.0"))
             for n in (2048, 8192, 32768)]
    assert len({p.num_gpu_blocks for p in plans}) == 1
    assert plans[0].max_concurrency == pytest.approx(plans[0].num_gpu_blocks / 128)


def test_pre_017_activation_is_larger():
    """Reported Qwen3-14B activation: 5.64 GiB on vLLM 0.15-0.16, 2.23 on 0.17-0.19."""
    spec = load_model("qwen3-14b")
    new = plan_capacity(spec, EngineArgs(gpu=load_gpu("h100"), vllm_version="0.19.0"))
    old = plan_capacity(spec, EngineArgs(gpu=load_gpu("h100"), vllm_version="0.16.0"))
    assert abs(new.activation_bytes / GIB - 2.23) < 0.05
    assert abs(old.activation_bytes / GIB - 5.64) < 0.05


def test_hybrid_groups_and_sliding_window_need():
    """vLLM's hybrid grouping: gemma-3 (52 sliding : 10 full) -> group_size 10, 6 sliding
    groups + 1 full; per request a full group needs cdiv(L, 16), a sliding one
    cdiv(min(window - 1 + mnbt, L), 16) + 1 blocks."""
    spec = load_model("gemma-3-27b-it")
    plan = plan_capacity(spec, EngineArgs(gpu=load_gpu("h100"), max_model_len=8192, vllm_version="0.19.0"))
    kinds = {g.kind: g for g in plan.groups}
    assert plan.binding_stage.group_size == 10
    assert kinds["sliding"].count == 6 and kinds["full"].count == 1
    sliding_need = -(-min(1024 - 1 + 8192, 8192) // 16) + 1
    assert plan.blocks_per_request == 6 * sliding_need + 512
    assert plan.max_concurrency == pytest.approx(plan.num_gpu_blocks / plan.blocks_per_request)
    assert plan.kv_cache_tokens == (plan.num_gpu_blocks // 7) * 16  # 0.19.0 hybrid token line


def test_llama2_7b_on_24gb_reproduces_vllm_error():
    """Acceptance: llama-2-7b, 24 GiB card, --max-model-len 32768 -> vLLM's error, in vLLM's
    wording, with the binary-searched estimated maximum model length."""
    spec = load_model("llama-2-7b")
    plan = plan_capacity(spec, EngineArgs(gpu=custom_gpu(24), max_model_len=32768))
    assert not plan.fits
    assert plan.error.startswith("ValueError: To serve at least one request with the model's max seq len (32768), "
                                 "(16.00 GiB KV cache is needed, which is larger than the available KV cache memory (")
    assert f"the estimated maximum model length is {plan.estimated_max_model_len}." in plan.error
    # vLLM's binary search: the largest L whose per-request need fits the available memory
    per_token = 512 * 1024
    m = plan.estimated_max_model_len
    assert -(-m // 16) * 16 * per_token <= plan.available_kv_cache_bytes < (-(-(m + 1) // 16)) * 16 * per_token
    assert "Try increasing `gpu_memory_utilization` or decreasing `max_model_len`" in plan.error


def test_no_memory_error_and_free_memory_error():
    """vLLM's two other start-up errors: available <= 0, and utilization above free memory."""
    spec = load_model("llama-3.1-8b-instruct")
    tiny = plan_capacity(spec, EngineArgs(gpu=custom_gpu(16)))
    assert tiny.error.startswith("ValueError: No available memory for the cache blocks.")
    full = plan_capacity(spec, EngineArgs(gpu=load_gpu("h100"), gpu_memory_utilization=1.0))
    assert full.error.startswith("ValueError: Free memory on device (")


def test_pipeline_parallel_takes_min_over_stages():
    spec = load_model("llama-3.1-8b-instruct")
    plan = plan_capacity(spec, EngineArgs(gpu=load_gpu("h100"), pipeline_parallel_size=2))
    assert len(plan.stages) == 2
    assert plan.num_gpu_blocks == min(s.num_blocks for s in plan.stages)


# --- the CLI ---------------------------------------------------------------------------------
BAD_INPUT = [
    (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization"),
    (["--gpu-memory-utilization", "1.5"], "(0, 1]"),
    (["--tp", "3"], "--tp 3"),
    (["--gpu", "h999"], "unknown GPU"),
    (["--gpu-memory-gib", "-24"], "--gpu-memory-gib"),
    (["--gpu", "h100", "--gpu-memory-gib", "80"], "not both"),
    (["--kv-cache-memory-bytes", "-1"], "--kv-cache-memory-bytes"),
    (["--kv-cache-memory-bytes", "1000000000", "--gpu-memory-utilization", "0.9"], "not both"),
    (["--vllm-version", "banana"], "--vllm-version"),
    (["--quantization", "nf9"], "quantization"),
    (["--target-concurrency", "0"], "--target-concurrency"),
    (["--max-num-seqs", "0"], "--max-num-seqs"),
]


@pytest.mark.parametrize(("extra", "needle"), BAD_INPUT)
def test_bad_input_exits_2_with_one_line(extra, needle, capsys):
    argv = ["estimate", "--model", "llama-3.1-8b-instruct"] + extra
    if not any(a in extra for a in ("--gpu", "--gpu-memory-gib")):
        argv += ["--gpu", "h100"]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kvplan: error:"), err
    assert needle in err[0]
    assert "Traceback" not in err[0]


def test_estimate_json_has_capacity_keys(capsys):
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "estimate",
                "--model",
                "llama-2-7b",
                "--ctx",
                "4096",
                "--concurrency",
                "8",
                "--gpu-memory-gib",
                "24",
                "--json",
            ]
        )
    assert exc.value.code == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("weights_bytes", "activation_bytes", "non_torch_bytes", "cudagraph_bytes", "available_kv_cache_bytes",
                "num_gpu_blocks", "kv_cache_tokens", "max_concurrency", "fits", "max_concurrency_at_ctx"):
        assert key in out
    # llama-2-7b: 8 x 4096 does not fit on 24 GiB, and the reported concurrency is the one that does
    assert out["fits"] is False
    assert 1 <= out["max_concurrency_at_ctx"] < 8
    assert out["kv_available_bytes_per_gpu"] == out["available_kv_cache_bytes"]


def test_estimate_stays_light():
    """`kvplan estimate` with a GPU must not import torch, transformers, pandas or matplotlib."""
    code = (
        "import sys\nfrom kvplan.cli import main\n"
        "try:\n    main(['estimate','--model','llama-2-7b','--gpu','h100','--max-model-len','32768',"
        "'--target-concurrency','4','--json'])\n"
        "except SystemExit:\n    pass\n"
        "print([m for m in ('torch','transformers','pandas','matplotlib') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
