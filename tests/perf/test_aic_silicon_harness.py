"""benchmarks/aic_silicon.py's client replays: which requests hit vLLM's prefix cache under aiperf's
shuffled finite dataset, and the source -> harness mapping."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("aic_silicon", ROOT / "benchmarks" / "aic_silicon.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("aic_silicon", module)
    spec.loader.exec_module(module)
    return module


def test_aiperf_prompts_repeat_after_the_dataset_and_hit_full_blocks():
    a = _bench()
    h = a.HARNESSES["aiperf"]
    # c=8: 16 warmups, then 160 profiled requests; global index 16 + k repeats iff >= 100
    reqs = h.requests(8, 1000, 100, num_gpu_blocks=10**6, block_size=16)
    assert len(reqs) == 160
    assert all(r.prompt_tokens == 1000 and r.output_tokens == 100 for r in reqs)  # fixed lengths
    hits = [r.cached_tokens for r in reqs]
    assert hits[:84] == [0] * 84 and set(hits[84:]) == {992}  # (1000 - 1) // 16 * 16: the last token recomputed


def test_aiperf_reuse_misses_when_the_pool_cannot_hold_the_dataset():
    a = _bench()
    h = a.HARNESSES["aiperf"]
    need = (100 + 8) * -(-(1000 + 100) // 16)  # every entry beside the running batch
    assert all(r.cached_tokens for r in h.requests(8, 1000, 100, need, 16)[84:])
    assert not any(r.cached_tokens for r in h.requests(8, 1000, 100, need - 1, 16))


def test_inferencemax_draws_lengths_and_never_reuses():
    a = _bench()
    reqs = a.HARNESSES["inferencemax"].requests(4, 1000, 100, 10**6, 16)
    assert len(reqs) == 40
    assert all(800 <= r.prompt_tokens <= 1000 and 80 <= r.output_tokens <= 100 for r in reqs)
    assert len({r.prompt_tokens for r in reqs}) > 1 and not any(r.cached_tokens for r in reqs)


def test_gap_rows_use_aiperf_only_when_asked():
    a = _bench()
    gap = {"silicon_data_source": "source_file=/x/aic-auto-gap-analysis/data/h200.csv; silicon_concurrency=8"}
    imax = {"silicon_data_source": "source_file=2026-04-06.csv; model=GPT-OSS-120B"}
    assert a.harness(gap, "aiperf") is a.HARNESSES["aiperf"]
    assert a.harness(gap, "inferencemax") is a.HARNESSES["inferencemax"]
    assert a.harness(imax, "aiperf") is a.HARNESSES["inferencemax"]


def test_nvfp4_rows_run_nvidias_published_checkpoint_where_its_config_is_carried():
    """A MiniMax-M2.5 row at gemm_quant_mode nvfp4 is NVIDIA's ModelOpt checkpoint (attention in
    bf16, an FP8 KV cache as its config declares), not a synthesized all-NVFP4 one; Llama-3.1-70B,
    whose NVFP4 config is not carried, is synthesized from the architecture."""
    a = _bench()
    spec, quant = a.row_model({"model_path": "MiniMaxAI/MiniMax-M2.5", "gemm_quant_mode": "nvfp4"}, {})
    assert quant is None and spec.quant.method == "nvfp4" and spec.quant.kv_cache_dtype == "fp8"
    assert dict((g, pct) for g, _, pct in spec.quant.groups)["attention"] == 0
    llama, _ = a.row_model({"model_path": "meta-llama/Llama-3.1-70B", "gemm_quant_mode": "nvfp4"}, {})
    assert llama.quant.method == "nvfp4" and llama.quant.kv_cache_dtype is None


def test_aiperf_rows_run_the_flags_aiconfigurators_generator_writes():
    """AIConfigurator 0.12's generator (generator/rule_plugin/vllm.rule, default rule), run through its
    rule engine for an agg worker of batch 8 at isl 4096 / osl 128, wrote max_batch_size 512,
    max_num_tokens 6108 and max_seq_len 5724 (--max-num-seqs, --max-num-batched-tokens,
    --max-model-len); InferenceMAX's servers keep vLLM's defaults."""
    a = _bench()
    assert a.HARNESSES["aiperf"].engine_flags(4096, 128, 8) == {
        "max_num_seqs": 512, "max_num_batched_tokens": 6108, "max_model_len": 5724}
    assert a.HARNESSES["aiperf"].engine_flags(1024, 1024, 600)["max_num_seqs"] == 1200  # 2 x batch from 512 up
    assert a.HARNESSES["inferencemax"].engine_flags(4096, 128, 8) == {"max_model_len": 4096 + 128 + 16}
