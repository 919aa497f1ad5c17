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


# --- vLLM's "KV cache is needed" and its binary search, by hand (kv_cache_utils.py) -----------------
def test_needed_bytes_of_one_request_by_hand():
    """llama-2-7b (32 layers x 32 KV heads x 128, fp16): 512 KiB a token, paged by 16-token blocks;
    TP 2 holds half the heads. falcon-mamba-7b: 311,296 B of state a layer whatever the length
    (test_kv derives it), two pages with mamba_cache_mode align, halved at TP 2."""
    from kvplan.plan.budget import needed_bytes

    llama = load_model("llama-2-7b")
    one, two = EngineArgs(gpu=load_gpu("h100")), EngineArgs(gpu=load_gpu("h100"), tensor_parallel_size=2)
    assert needed_bytes(llama, range(32), one, 4096, 8192) == 4096 * 512 * 1024 == 2 * GIB
    assert needed_bytes(llama, range(32), one, 4097, 8192) == 4112 * 512 * 1024  # a 257th block
    assert needed_bytes(llama, range(32), two, 4096, 8192) == GIB
    assert needed_bytes(llama, range(16), one, 4096, 8192) == GIB  # the layers asked for only
    mamba = load_model("falcon-mamba-7b")
    assert needed_bytes(mamba, range(64), one, 100, 8192) == needed_bytes(mamba, range(64), one, 9000, 8192) \
        == 64 * 311_296
    assert needed_bytes(mamba, range(64), two, 100, 8192) == 32 * 311_296
    align = EngineArgs(gpu=load_gpu("h100"), mamba_cache_mode="align")
    assert needed_bytes(mamba, range(64), align, 100, 8192) == 2 * 64 * 311_296


def test_a_sliding_window_need_follows_the_batch_budget():
    """gemma-3-27b-it (52 sliding layers of window 1,024, 10 full; 16 KV heads x 128, bf16: 128 KiB a
    16-token block a layer) at 8,192 tokens: a full layer needs 512 blocks, a sliding one
    cdiv(min(1,023 + max_num_batched_tokens, 8,192), 16) + 1."""
    from kvplan.plan.budget import needed_bytes

    spec = load_model("gemma-3-27b-it")
    args = EngineArgs(gpu=load_gpu("h100"))
    page = 16 * 2 * 16 * 128 * 2
    assert needed_bytes(spec, range(62), args, 8192, 512) == page * (10 * 512 + 52 * (-(-1535 // 16) + 1))
    assert needed_bytes(spec, range(62), args, 8192, 8192) == page * (10 * 512 + 52 * 513)


def test_estimated_max_model_len_is_the_last_length_that_fits():
    """llama-2-7b: n tokens need cdiv(n, 16) x 8 MiB; the search ends on whole blocks."""
    from kvplan.plan.budget import estimate_max_model_len

    spec, args = load_model("llama-2-7b"), EngineArgs(gpu=load_gpu("h100"))
    block = 8 * 2**20

    def est(available: int, mml: int = 8192, mnbt: int = 8192) -> int:
        return estimate_max_model_len(spec, range(32), args, available, mml, mnbt)

    assert est(256 * block) == 4096  # exactly 256 blocks: 4,096 tokens fit, 4,097 do not
    assert est(256 * block - 1) == 4080
    assert est(block) == 16 and est(block - 1) == 0  # not one block: 0, as vLLM says nothing fits
    assert est(10**15, mml=3000) == 3000  # never past max_model_len
    gemma, gargs = load_model("gemma-3-27b-it"), EngineArgs(gpu=load_gpu("h100"))
    page = 16 * 2 * 16 * 128 * 2
    # at 8,192 tokens a 512-token batch needs 10 x 512 + 52 x 97 blocks, a 8,192-token one 10 x 512 + 52 x 513
    small_batch = page * (10 * 512 + 52 * 97)
    assert estimate_max_model_len(gemma, range(62), gargs, small_batch, 8192, 512) == 8192
    assert estimate_max_model_len(gemma, range(62), gargs, small_batch, 8192, 8192) < 8192


# --- the batch limits in force (vLLM's defaults and its refusals as warnings) -----------------------
def test_batch_limits_name_what_was_defaulted_and_warn_at_the_bounds():
    spec = load_model("llama-2-7b")  # max_position_embeddings 4,096
    h100 = load_gpu("h100")
    plan = plan_capacity(spec, EngineArgs(gpu=h100))
    assert plan.defaulted == ("max_num_seqs", "max_num_batched_tokens", "max_model_len") and not plan.warnings
    assert plan_capacity(spec, EngineArgs(gpu=h100, max_num_seqs=8)).defaulted == (
        "max_num_batched_tokens", "max_model_len")
    assert not plan_capacity(spec, EngineArgs(gpu=h100, max_model_len=4096)).warnings
    long = plan_capacity(spec, EngineArgs(gpu=h100, max_model_len=4097))
    assert long.warnings == ("--max-model-len 4097 exceeds llama-2-7b's max_position_embeddings (4096); vLLM "
                             "refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",)
    equal = plan_capacity(spec, EngineArgs(gpu=h100, max_num_seqs=256, max_num_batched_tokens=256))
    assert not equal.warnings
    fewer = plan_capacity(spec, EngineArgs(gpu=h100, max_num_seqs=256, max_num_batched_tokens=255))
    assert fewer.warnings == ("--max-num-batched-tokens 255 < --max-num-seqs 256: vLLM rejects this",)


def test_each_pipeline_stage_is_charged_for_its_own_rank():
    """PP 3 x TP 2 of Llama-3.1-8B (32 layers: vLLM's get_pp_indices gives 11 / 11 / 10), float32,
    64 sequences and batched tokens (so the sampler's logits outweigh the forward): each stage's
    weights, activation, non-torch and CUDA-graph terms are the overhead models' for that rank, TP,
    dtype and batch. By hand: the first stage holds the embedding (128,256 x 4,096 fp32 =
    2,101,346,304 B, half per TP rank), the last the LM head and final norm; only the last computes
    logits; the graphs of 10 layers are fewer than those of 11."""
    from kvplan.plan import overheads as oh

    spec = load_model("llama-3.1-8b-instruct")
    args = EngineArgs(gpu=load_gpu("h200"), tensor_parallel_size=2, pipeline_parallel_size=3, dtype="float32",
                      max_num_seqs=64, max_num_batched_tokens=64, vllm_version="0.19.0")
    plan = plan_capacity(spec, args)
    s0, s1, s2 = plan.stages
    assert [s.layers for s in plan.stages] == [11, 11, 10]
    assert s0.weights_bytes - s1.weights_bytes == 128_256 * 4096 * 4 // 2  # vocab-parallel: half per TP rank
    assert s0.activation_bytes == s1.activation_bytes < s2.activation_bytes  # the sampler's logits: last stage only
    version = (0, 19, 0)
    for rank, st in enumerate(plan.stages):
        assert st.weights_bytes == oh.weights_bytes_per_gpu(spec, dtype="float32", quantization=None, tp=2, pp=3,
                                                            pp_rank=rank, expert_shards=args.moe_group_size)
        assert st.activation_bytes == oh.activation_bytes(spec, dtype="float32", max_num_batched_tokens=64,
                                                          max_num_seqs=64, tp=2, last_stage=rank == 2, version=version)
        assert st.non_torch_bytes == oh.non_torch_bytes(2, 3) > oh.non_torch_bytes(2, 1)
        assert st.cudagraph_bytes == oh.cudagraph_bytes(spec, dtype="float32", tp=2, pp=3, pp_rank=rank,
                                                        max_num_seqs=64)
    assert s2.cudagraph_bytes < s1.cudagraph_bytes
    one_tp = plan_capacity(spec, replace(args, tensor_parallel_size=1)).stages[0]
    assert one_tp.activation_bytes > s0.activation_bytes and one_tp.cudagraph_bytes > s0.cudagraph_bytes
    bf16 = plan_capacity(spec, replace(args, dtype="bfloat16")).stages[0]
    assert bf16.cudagraph_bytes < s0.cudagraph_bytes
    more_seqs = plan_capacity(spec, replace(args, max_num_seqs=256)).stages[0]  # captures 512 tokens, not 128
    assert more_seqs.cudagraph_bytes > s0.cudagraph_bytes


# --- the capacity log lines by version, and the start-up errors at their bounds ---------------------
def _gemma2_9b(version: str, blocks: int = 1000, **kw):
    """gemma-2-9b: 21 sliding (window 4,096) + 21 full layers of 8 KV heads x 256, bf16: two groups
    of 21 layers, a block id = 21 pages of 16 x 2 x 8 x 256 x 2 = 131,072 B."""
    spec = load_model("gemma-2-9b")
    block_bytes = 21 * 131_072
    args = EngineArgs(kv_cache_memory_bytes=blocks * block_bytes, max_model_len=4096, vllm_version=version, **kw)
    return plan_capacity(spec, args)


def test_token_line_and_concurrency_by_version():
    """1,000 block ids; a 4,096-token request needs 256 full + cdiv(min(4,095 + 8,192, 4,096), 16) + 1
    = 257 sliding blocks = 513. Before 0.20 the token line is (blocks // groups) x 16 = 8,000; from
    0.20, int(max concurrency x max_model_len) = int(1,000 / 513 x 4,096) = 7,984. V1 concurrency is
    blocks / need; V0 (before 0.8) blocks x block size / max_model_len."""
    old, new = _gemma2_9b("0.19.0"), _gemma2_9b("0.20.0")
    assert old.num_gpu_blocks == new.num_gpu_blocks == 1000 and old.blocks_per_request == 513
    assert old.max_concurrency == new.max_concurrency == 1000 / 513
    assert (old.kv_cache_tokens, new.kv_cache_tokens) == (8000, 7984)
    first_v1 = _gemma2_9b("0.8.0")
    assert first_v1.max_concurrency == 1000 / 513
    llama = load_model("llama-2-7b")  # one group: blocks x 16 before 0.20
    v0 = plan_capacity(llama, EngineArgs(kv_cache_memory_bytes=1000 * 8 * 2**20, max_model_len=4096,
                                         vllm_version="0.7.3"))
    assert v0.num_gpu_blocks == 1000 and v0.max_concurrency == 1000 * 16 / 4096 and v0.kv_cache_tokens == 16_000


def test_unmodelled_pool_concurrency_is_the_budget_over_one_request():
    """DeepSeek-V4-Pro (its pool layout is not modelled): max concurrency = available bytes / one
    max_model_len request's paged bytes (vLLM's "KV cache is needed"), the token line that times
    max_model_len, blocks per request the need in whole block ids; no budget gives 0, never less."""
    import json
    from pathlib import Path

    from kvplan.spec.model import spec_from_config

    path = Path(__file__).parents[1] / "data/aiconfigurator/model_configs/deepseek-ai--DeepSeek-V4-Pro_config.json"
    spec = spec_from_config(json.loads(path.read_text()), "deepseek-v4-pro")
    args = EngineArgs(kv_cache_memory_bytes=40 * GIB, max_model_len=65_536, tensor_parallel_size=8,
                      vllm_version="0.19.0")
    plan = plan_capacity(spec, args)
    need = plan.kv_bytes_per_request
    assert plan.max_concurrency == 40 * GIB / need
    assert plan.kv_cache_tokens == int(40 * GIB / need * 65_536)
    assert plan.blocks_per_request == -(-need // plan.block_bytes)
    empty = plan_capacity(spec, replace(args, kv_cache_memory_bytes=0))
    assert (empty.max_concurrency, empty.kv_cache_tokens) == (0.0, 0)


def test_start_up_errors_at_their_bounds():
    """llama-2-7b at 4,096 tokens needs exactly 2 GiB (256 blocks of 8 MiB)."""
    spec = load_model("llama-2-7b")
    base = EngineArgs(max_model_len=4096, vllm_version="0.19.0")
    exact = plan_capacity(spec, replace(base, kv_cache_memory_bytes=2 * GIB))
    assert exact.fits and exact.error is None and exact.estimated_max_model_len == 4096
    short = plan_capacity(spec, replace(base, kv_cache_memory_bytes=2 * GIB - 1))
    assert short.error.startswith("ValueError: To serve at least one request with the model's max seq len (4096), "
                                  "(2.00 GiB KV cache is needed, which is larger than the available KV cache memory "
                                  "(2.00 GiB). Based on the available memory, the estimated maximum model length is "
                                  "4080. Try increasing")
    assert (short.kv_bytes_per_request, short.estimated_max_model_len) == (2 * GIB, 4080)
    one = plan_capacity(spec, replace(base, kv_cache_memory_bytes=1))  # a byte: the need error, and no estimate
    assert one.error.startswith("ValueError: To serve at least one request") and "estimated" not in one.error
    assert one.estimated_max_model_len == 0
    none = plan_capacity(spec, replace(base, kv_cache_memory_bytes=0))
    assert none.error.startswith("ValueError: No available memory for the cache blocks.")
    assert (none.kv_bytes_per_request, none.estimated_max_model_len) == (2 * GIB, 0)
    older = plan_capacity(spec, replace(base, kv_cache_memory_bytes=1, vllm_version="0.11.0"))
    assert "with the models's max seq len (4096)" in older.error  # vLLM's wording before 0.12


def test_v0_checks_pool_tokens_against_max_model_len():
    """Before V1 (0.8) vLLM compares the pool's tokens with max_model_len: 256 blocks hold 4,096."""
    spec = load_model("llama-2-7b")
    base = EngineArgs(kv_cache_memory_bytes=256 * 8 * 2**20, vllm_version="0.7.3")
    assert plan_capacity(spec, replace(base, max_model_len=4096)).fits
    over = plan_capacity(spec, replace(base, max_model_len=4097))
    assert over.error == ("ValueError: The model's max seq len (4097) is larger than the maximum number of tokens "
                          "that can be stored in KV cache (4096). Try increasing `gpu_memory_utilization` or "
                          "decreasing `max_model_len` when initializing the engine.")
    assert (over.kv_bytes_per_request, over.estimated_max_model_len) == (4112 * 512 * 1024, 4096)


def test_free_memory_error_names_free_and_total():
    """H100 (85,029,615,043 B as CUDA reports it) less the CUDA context vLLM finds resident (0.51
    GiB, kvplan's figure): 78.68 of 79.19 GiB free; utilization 1.0 asks for all 79.19."""
    spec = load_model("llama-3.1-8b-instruct")
    full = plan_capacity(spec, EngineArgs(gpu=load_gpu("h100"), gpu_memory_utilization=1.0, max_model_len=8192))
    assert full.error == ("ValueError: Free memory on device (78.68/79.19 GiB) on startup is less than desired GPU "
                          "memory utilization (1.0, 79.19 GiB). Decrease GPU memory utilization or reduce GPU "
                          "memory used by other processes.")
    assert full.estimated_max_model_len == 8192 and full.kv_bytes_per_request == 8192 * 128 * 1024
    # exactly the free memory asked for: no such error (vLLM's check is strictly greater)
    from kvplan.plan import overheads as oh

    total = 2 * oh.CUDA_CONTEXT_BYTES
    at_free = plan_capacity(spec, EngineArgs(gpu=custom_gpu(total / GIB), gpu_memory_utilization=0.5))
    assert at_free.requested_bytes == total - oh.CUDA_CONTEXT_BYTES
    assert not at_free.error.startswith("ValueError: Free memory")


# --- what the plan warns of -----------------------------------------------------------------------
def test_cuda_graphs_past_the_device_before_0_21_are_warned():
    """Before 0.21 graphs are captured after the pool: CUDA context (0.51 GiB) + util x 79.19 GiB +
    the graphs must fit the H100's 79.19 GiB; at 0.99 they cannot, at 0.95 they can; eager and 0.21
    (graphs budgeted) never warn."""
    from kvplan.plan import overheads as oh

    spec, h100 = load_model("llama-3.1-8b-instruct"), load_gpu("h100")
    tight = plan_capacity(spec, EngineArgs(gpu=h100, gpu_memory_utilization=0.99, vllm_version="0.19.0"))
    peak = oh.CUDA_CONTEXT_BYTES + int(h100.memory_bytes * 0.99) + tight.cudagraph_bytes
    assert tight.cudagraph_bytes > 0 and tight.warnings == (
        f"CUDA graphs (~{tight.cudagraph_bytes / GIB:.2f} GiB) are captured after the KV cache and are not budgeted "
        f"before vLLM 0.21: about {peak / GIB:.2f} GiB would be used of 79.19 GiB, so capture will likely OOM; lower "
        "--gpu-memory-utilization or add --enforce-eager",)
    assert not plan_capacity(spec, EngineArgs(gpu=h100, gpu_memory_utilization=0.95, vllm_version="0.19.0")).warnings
    for quiet in (dict(enforce_eager=True, vllm_version="0.19.0"), dict(vllm_version="0.21.0")):
        assert not plan_capacity(spec, EngineArgs(gpu=h100, gpu_memory_utilization=0.99, **quiet)).warnings


def test_free_memory_counts_the_nccl_context_from_two_ranks():
    """TP 2 adds vLLM's NCCL context (kvplan's 1.0 GiB) to what is resident before the budget:
    0.99 x 79.19 = 78.40 GiB fits beside 0.51 GiB but not beside 1.51 GiB (77.68 free)."""
    spec, h100 = load_model("llama-3.1-8b-instruct"), load_gpu("h100")
    assert plan_capacity(spec, EngineArgs(gpu=h100, gpu_memory_utilization=0.99, vllm_version="0.21.0")).fits
    two = plan_capacity(spec, EngineArgs(gpu=h100, gpu_memory_utilization=0.99, tensor_parallel_size=2,
                                         vllm_version="0.21.0"))
    assert two.error.startswith("ValueError: Free memory on device (77.68/79.19 GiB) on startup is less than desired "
                                "GPU memory utilization (0.99, 78.40 GiB).")


def test_state_outside_the_pool_before_0_10_is_named():
    mamba, llama, h100 = load_model("falcon-mamba-7b"), load_model("llama-2-7b"), load_gpu("h100")
    old = plan_capacity(mamba, EngineArgs(gpu=h100, vllm_version="0.9.2"))
    assert ("vLLM 0.9.2 kept Mamba state outside the KV cache pool; kvplan models the V1 hybrid allocator of vLLM "
            "0.10 and later, so its figures for this model are approximate") in old.warnings
    assert not any("Mamba" in w for w in plan_capacity(mamba, EngineArgs(gpu=h100, vllm_version="0.10.0")).warnings)
    assert not any("Mamba" in w for w in plan_capacity(llama, EngineArgs(gpu=h100, vllm_version="0.9.2")).warnings)


def test_encoder_warnings_by_case():
    """gemma-3-27b-it: a SigLIP image is 896/14 = 64 x 64 = 4,096 patches and 260 prompt tokens (256
    soft tokens with its markers); an 8,192-token batch profiles floor(8,192 / 260) = 31 images.
    Before V1 the profile is not modelled; --skip-mm-profiling reserves nothing; an audio tower
    the weight count leaves out is named unless the checkpoint's bytes are known."""
    from kvplan.spec.model import spec_from_config

    spec, h100 = load_model("gemma-3-27b-it"), load_gpu("h100")
    args = EngineArgs(gpu=h100, max_model_len=8192, vllm_version="0.19.0")
    (profiled,) = plan_capacity(spec, args).warnings
    assert profiled.startswith("gemma-3-27b-it: vLLM profiles the vision encoder on 31 image item(s) of 260 tokens "
                               "(126,976 ViT patches): ")
    assert profiled.endswith(" GiB of outputs beside the decoder's dummy forward, charged to the activation (predicted "
                             "from vLLM's rules; --limit-mm-per-prompt image=0,video=0 plans a text-only deployment)")
    assert plan_capacity(spec, replace(args, vllm_version="0.7.3")).warnings == (
        "gemma-3-27b-it: vLLM's encoder profiling is not modelled for this tower or version (a dummy multimodal batch "
        "in the profile run), so KV may be over-predicted by a few percent; --limit-mm-per-prompt image=0,video=0 "
        "plans a text-only deployment",)
    assert plan_capacity(spec, replace(args, skip_mm_profiling=True)).warnings == (
        "gemma-3-27b-it: --skip-mm-profiling: the vision encoder's activations are not reserved, so a request with "
        "images can run out of memory at the KV cache vLLM sized without them",)
    with_audio = spec_from_config({**spec.config, "audio_config": {}}, "g3-audio")
    gap = ("g3-audio: the audio tower (audio_config) is not counted: weights are under-predicted by its size; a local "
           "model directory with its safetensors gives the exact weight bytes")
    assert gap in plan_capacity(with_audio, args).warnings
    assert gap not in plan_capacity(replace(with_audio, checkpoint_weights_bytes=10**10), args).warnings
    assert gap not in plan_capacity(spec, args).warnings
    both = plan_capacity(spec, replace(args, max_num_seqs=256, max_num_batched_tokens=255))
    assert len(both.warnings) == 2 and both.warnings[0].startswith("--max-num-batched-tokens 255")  # kept together


def test_the_plan_says_what_it_planned():
    from kvplan.plan import overheads as oh

    spec, h100 = load_model("llama-2-7b"), load_gpu("h100")
    plan = plan_capacity(spec, EngineArgs(gpu=h100, max_model_len=4096, vllm_version="0.19.0"))
    assert plan.spec_name == "llama-2-7b" and plan.kv_bytes_per_request == 2 * GIB
    assert plan.requested_bytes == int(h100.memory_bytes * 0.9)
    assert plan.defaults_rule == oh.batch_defaults(h100.memory_bytes, h100.name, (0, 19, 0), 4096).rule != ""
    given = plan_capacity(spec, EngineArgs(kv_cache_memory_bytes=3 * GIB, max_model_len=4096))
    assert given.requested_bytes == 3 * GIB and given.gpu_memory_bytes is None
    mamba = load_model("falcon-mamba-7b")
    assert plan_capacity(mamba, EngineArgs(gpu=h100, mamba_cache_mode="align")).mamba_cache_mode == "align"


# --- hybrid state models, MoE expert sharding, the encoder's dtype ---------------------------------
def test_a_hybrid_model_s_need_uses_the_block_size_of_its_tp():
    """qwen3-next-80b-a3b (12 full-attention layers of 2 KV heads x 256, 36 gated-DeltaNet layers;
    bf16). At TP 4 a rank keeps 1 KV head: 1,024 B a token a layer; its DeltaNet state is a conv
    state of 3 x (16 x 128 x 2 + 32 x 128) / 4 x 2 B = 12,288 B and an SSM state of 32 / 4 x 128 x
    128 x 2 B = 262,144 B, so vLLM raises the block to cdiv(274,432 / 1,024, 16) x 16 = 272 tokens
    (544 at TP 1) and pads the state page to the attention page, 278,528 B. At 4,096 tokens a
    request needs 12 x 16 attention pages + 36 state pages (mamba_cache_mode none before 0.28)."""
    from kvplan.plan.budget import needed_bytes

    spec = load_model("qwen3-next-80b-a3b-thinking")
    args = EngineArgs(gpu=load_gpu("h100"), tensor_parallel_size=4, vllm_version="0.19.0")
    assert needed_bytes(spec, range(48), args, 4096, 8192) == (12 * 16 + 36) * 272 * 1024
    plan = plan_capacity(spec, replace(args, max_model_len=4096))
    assert plan.block_size_tokens == 272 and plan.state_page_bytes == 272 * 1024 and plan.mamba_cache_mode == "none"
    # vLLM's MambaSpec.block_size: max_model_len without prefix caching, the attention block in "align"
    state_group = next(g for g in plan.groups if g.kind == "state")
    assert state_group.block_size == 4096
    aligned = plan_capacity(spec, replace(args, max_model_len=4096, mamba_cache_mode="align"))
    assert next(g for g in aligned.groups if g.kind == "state").block_size == 272
    assert aligned.kv_bytes_per_request == (12 * 16 + 2 * 36) * 272 * 1024  # two state pages a layer


def test_experts_are_sharded_over_every_data_parallel_rank():
    """Qwen3-30B-A3B: 48 layers x 128 experts x 3 x 2,048 x 768 bf16 = 57,982,058,496 B of experts;
    with --data-parallel-size 2 and expert parallelism each GPU holds half of them."""
    spec = load_model("qwen3-30b-a3b")
    one = plan_capacity(spec, EngineArgs(gpu=load_gpu("h100"), vllm_version="0.19.0"))
    two = plan_capacity(spec, EngineArgs(gpu=load_gpu("h100"), data_parallel_size=2, enable_expert_parallel=True,
                                         vllm_version="0.19.0"))
    assert one.weights_bytes - two.weights_bytes == 57_982_058_496 // 2


def test_the_encoder_profile_runs_from_v1_in_the_served_dtype():
    """The encoder's outputs kept beside the decoder scale with the served dtype (fp32 = 2 x bf16);
    V1 (0.8.0 on) profiles the encoder."""
    spec, h100 = load_model("gemma-3-27b-it"), load_gpu("h100")
    args = EngineArgs(gpu=h100, max_model_len=8192, vllm_version="0.8.0")
    bf16 = plan_capacity(spec, args).stages[0].encoder
    fp32 = plan_capacity(spec, replace(args, dtype="float32")).stages[0].encoder
    assert bf16 is not None and fp32.cache_bytes == 2 * bf16.cache_bytes
