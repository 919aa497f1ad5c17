"""Hybrid, chunked and attention-free models: per-token KV, fixed per-request state and vLLM's
hybrid allocator, each expectation counted by hand from the config.json copy and vLLM's rules.

vLLM files the rules come from (cited per test):
- vllm/model_executor/layers/mamba/mamba_utils.py: MambaStateShapeCalculator / MambaStateDtypeCalculator
- vllm/v1/kv_cache_interface.py: MambaSpec.page_size_bytes, ChunkedLocalAttentionSpec.max_memory_usage_bytes
- vllm/platforms/interface.py `_align_hybrid_block_size` (vllm/model_executor/models/config.py
  HybridAttentionMambaModelConfig before 0.11): block size raised to 16 x cdiv(state, 16 x attn page per token)
- vllm/v1/core/kv_cache_utils.py: groups of `group_size` layers, tokens and concurrency log lines
"""
from __future__ import annotations

import csv
import json

import pytest

from kvplan.errors import ConfigError, KvplanError
from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.kv import KvLayout, unified_block_size
from kvplan.spec.gpu import load_gpu
from kvplan.spec.model import spec_from_config
from kvplan.spec.profiles import load_model
from kvplan.units import GIB


def _config(reference_dir, folder: str) -> dict:
    return json.loads((reference_dir / "hf-configs" / folder / "config.json").read_text())


# --- per family: KV bytes per token and state bytes per request, by hand ---------------------------
def test_qwen3_next_gated_deltanet(reference_dir):
    """Qwen3-Next-80B-A3B: no layer_types, full_attention_interval 4 -> 12 full + 36 GDN layers.
    KV/token: 2 (K,V) x 12 x 2 KV heads x 256 x 2 B. GDN state (mamba_utils.py gated_delta_net_state_shape):
    conv (3, 2*16*128 + 32*128) and ssm (32, 128, 128), both bf16 (no mamba_ssm_dtype in the config)."""
    spec = spec_from_config(_config(reference_dir, "Qwen--Qwen3-Next-80B-A3B-Thinking"), "qwen3-next")
    lay = KvLayout.of(spec)
    assert spec.attention_kinds == {"gdn": 36, "full": 12}
    assert [i for i, layer in enumerate(spec.layers) if layer.kind == "full"] == list(range(3, 48, 4))
    assert lay.bytes_per_token() == 2 * 12 * 2 * 256 * 2 == 24_576
    per_layer = 3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 2
    assert per_layer == 1_097_728
    assert lay.state_bytes_per_request() == 36 * per_layer
    # 16 x cdiv(1,097,728, 16 x 2,048) = 16 x 34 = 544 (the logged "Setting attention block size to 544")
    assert lay.block_size == 544
    assert 80e9 * 0.99 < spec.params.total < 80e9 * 1.01  # "80B total parameters"
    assert spec.params.mixer > 0 and spec.params.attention < spec.params.mixer  # GDN layers are not attention


def test_qwen3_5_fp32_state_from_the_config(reference_dir):
    """Qwen3.5-27B: text_config layer_types (48 linear + 16 full); mamba_ssm_dtype float32 makes vLLM keep
    the recurrent state in fp32 (Qwen3_5 verify_and_update_config -> mamba_ssm_cache_dtype)."""
    spec = spec_from_config(_config(reference_dir, "Qwen--Qwen3.5-27B"), "qwen3.5-27b")
    lay = KvLayout.of(spec)
    assert lay.bytes_per_token() == 2 * 16 * 4 * 256 * 2 == 65_536
    per_layer = 3 * (2 * 16 * 128 + 48 * 128) * 2 + 48 * 128 * 128 * 4
    assert lay.state_bytes_per_request() == 48 * per_layer == 153_944_064
    # 16 x cdiv(3,207,168, 16 x 4,096) = 16 x 49 = 784, the block size published for this 27B geometry
    assert lay.block_size == 784


def test_jamba_mamba1(reference_dir):
    """Jamba 1.5 Mini: attention at i % 8 == 4 (4 layers), Mamba v1 elsewhere (28). Mamba1 state
    (mamba1_state_shape): conv (3, 2 x 4096), ssm (2 x 4096, 16), bf16."""
    spec = spec_from_config(_config(reference_dir, "ai21labs--AI21-Jamba-1.5-Mini"), "jamba")
    lay = KvLayout.of(spec)
    assert [i for i, layer in enumerate(spec.layers) if layer.kind == "full"] == [4, 12, 20, 28]
    assert lay.bytes_per_token() == 2 * 4 * 8 * 128 * 2 == 16_384
    assert lay.state_bytes_per_request() == 28 * (3 * 8192 * 2 + 8192 * 16 * 2) == 8_716_288
    assert lay.block_size == 16 * -(-311_296 // (16 * 4096)) == 80
    assert 51.5e9 < spec.params.total < 51.7e9  # AI21: 52B total (51.6B)


def test_nemotron_h_pattern_and_ssm_dtype(reference_dir):
    """Nemotron-3-Nano-30B-A3B: hybrid_override_pattern, 23 M + 6 * + 23 E. Mamba2 state
    (mamba2_state_shape): intermediate = 64 heads x 64, conv (3, 4096 + 2 x 8 groups x 128),
    ssm (64, 64, 128) in the config's mamba_ssm_cache_dtype float32."""
    spec = spec_from_config(_config(reference_dir, "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"), "nano")
    lay = KvLayout.of(spec)
    assert spec.attention_kinds == {"mamba2": 23, "mlp": 23, "full": 6}
    assert lay.bytes_per_token() == 2 * 6 * 2 * 128 * 2 == 6_144
    per_layer = 3 * (4096 + 2 * 8 * 128) * 2 + 64 * 64 * 128 * 4
    assert lay.state_bytes_per_request() == 23 * per_layer
    assert lay.block_size == 16 * -(-per_layer // (16 * 1024)) == 2096
    assert 31.5e9 < spec.params.total < 31.7e9  # NVIDIA: 31.6B total


def test_nemotron_h_without_ssm_dtype_uses_vllms_float16(reference_dir):
    """Nemotron-H-56B has no mamba_ssm_cache_dtype: vLLM's NemotronHForCausalLMConfig sets float16."""
    spec = spec_from_config(_config(reference_dir, "nvidia--Nemotron-H-56B-Base-8K"), "nemotron-h-56b")
    per_layer = 3 * (256 * 64 + 2 * 8 * 256) * 2 + 256 * 64 * 256 * 2
    assert spec.attention_kinds == {"mamba2": 54, "mlp": 54, "full": 10}
    assert KvLayout.of(spec).state_bytes_per_request() == 54 * per_layer


def test_pure_mamba_has_no_kv(reference_dir):
    """Falcon-Mamba-7B (Mamba v1, attention-free): 0 B of KV per token, a fixed state per request."""
    spec = spec_from_config(_config(reference_dir, "tiiuae--falcon-mamba-7b"), "falcon-mamba")
    lay = KvLayout.of(spec)
    assert lay.bytes_per_token() == 0 and lay.bytes_per_block() == 0
    assert lay.state_bytes_per_request() == 64 * (3 * 8192 * 2 + 8192 * 16 * 2)
    assert lay.request_bytes(100) == lay.request_bytes(100_000) == lay.state_bytes_per_request()
    assert 7.2e9 < spec.params.total < 7.35e9  # TII: 7.27B


def test_llama4_chunked_local_attention(reference_dir):
    """Llama-4 Scout: RoPE layers attend in 8,192-token chunks, every 4th (NoPE) layer is full.
    A 131,072-token request holds 12 x 131,072 + 36 x 8,192 tokens; vLLM reserves
    cdiv(min(8192 + max_num_batched_tokens, max_model_len), 16) blocks per chunked layer
    (kv_cache_interface.py ChunkedLocalAttentionSpec)."""
    spec = spec_from_config(_config(reference_dir, "meta-llama--Llama-4-Scout-17B-16E-Instruct"), "scout")
    lay = KvLayout.of(spec)
    assert spec.attention_kinds == {"chunked": 36, "full": 12}
    assert lay.bytes_per_token() == 2 * 48 * 8 * 128 * 2
    assert lay.request_bytes(131_072) == (12 * 131_072 + 36 * 8192) * 2 * 8 * 128 * 2
    plan = plan_capacity(spec, EngineArgs(kv_cache_memory_bytes=40 * GIB, tensor_parallel_size=4, max_model_len=131_072,
                                          max_num_batched_tokens=8192))
    assert plan.blocks_per_request == 131_072 // 16 + 3 * (16_384 // 16)  # 1 full + 3 chunked groups of 12


def test_gemma3n_kv_shared_layers_and_list_intermediate():
    """Gemma-3n (transformers' Gemma3nTextConfig defaults: 35 layers, 15 KV-shared, per-layer
    intermediate_size list): shared layers hold no cache (vLLM gemma3n.py kv_sharing_target_layer_name)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model("gemma3n").to_dict()
    text = cfg["text_config"]
    assert isinstance(text["intermediate_size"], list)
    spec = spec_from_config(cfg, "gemma3n")
    own = text["num_hidden_layers"] - text["num_kv_shared_layers"]
    assert spec.attention_kinds["shared"] == text["num_kv_shared_layers"]
    assert KvLayout.of(spec).bytes_per_token() == own * 2 * text["num_key_value_heads"] * text["head_dim"] * 2


def test_mllama_cross_attention_is_per_request():
    """Llama-3.2-Vision (MllamaConfig defaults): cross_attention_layers cache the image's encoder tokens
    (max_num_tiles x (patches + 1)) once per request, not per text token."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model("mllama").to_dict()
    text, vision = cfg["text_config"], cfg["vision_config"]
    spec = spec_from_config(cfg, "mllama")
    lay = KvLayout.of(spec)
    n_cross = len(text["cross_attention_layers"])
    per_layer_token = 2 * text["num_key_value_heads"] * (text["hidden_size"] // text["num_attention_heads"]) * 2
    assert spec.attention_kinds == {"full": text["num_hidden_layers"] - n_cross, "cross": n_cross}
    assert lay.bytes_per_token() == (text["num_hidden_layers"] - n_cross) * per_layer_token
    enc = vision["max_num_tiles"] * ((vision["image_size"] // vision["patch_size"]) ** 2 + 1)
    cross_bytes = n_cross * -(-enc // 16) * 16 * per_layer_token
    assert lay.request_bytes(16) - lay.bytes_per_token() * 16 == cross_bytes


def test_falcon_h1_layers_hold_both():
    """Falcon-H1 (FalconH1Config defaults): every layer runs attention and a Mamba2 mixer side by side;
    mamba_d_ssm sets the mixer's width (vLLM falcon_h1.py get_mamba_state_shape_from_config)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model("falcon_h1").to_dict()
    spec = spec_from_config(cfg, "falcon-h1")
    n, inner, groups, d_state = (
        cfg["num_hidden_layers"],
        cfg["mamba_d_ssm"],
        cfg["mamba_n_groups"],
        cfg["mamba_d_state"],
    )
    per_layer = (cfg["mamba_d_conv"] - 1) * (inner + 2 * groups * d_state) * 2 + cfg["mamba_n_heads"] * cfg[
        "mamba_d_head"
    ] * d_state * 2
    assert spec.attention_kinds == {"full+mamba2": n}
    assert KvLayout.of(spec).state_bytes_per_request() == n * per_layer


def test_granite_4_h_layer_types_mamba():
    """Granite-4.0-H (GraniteMoeHybridConfig): `layer_types` "mamba" / "attention"."""
    transformers = pytest.importorskip("transformers")
    types = ["mamba"] * 9 + ["attention"] + ["mamba"] * 9 + ["attention"]
    cfg = transformers.AutoConfig.for_model("granitemoehybrid", num_hidden_layers=20, layer_types=types).to_dict()
    spec = spec_from_config(cfg, "granite-4-h")
    assert spec.attention_kinds == {"mamba2": 18, "full": 2}
    heads, hd, n = cfg["mamba_n_heads"], cfg["mamba_d_head"], cfg["mamba_d_state"]
    conv = (cfg["mamba_expand"] * cfg["hidden_size"] + 2 * cfg["mamba_n_groups"] * n) * (cfg["mamba_d_conv"] - 1)
    assert KvLayout.of(spec).state_bytes_per_request() == 18 * (conv + heads * hd * n) * 2


# --- vLLM's hybrid allocator, replayed on logged start-ups -----------------------------------------
def _hybrid_rows(reference_dir):
    with (reference_dir / "vllm-hybrid-startup.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def _hybrid_args(row, kv_bytes: int) -> EngineArgs:
    return EngineArgs(
        gpu=load_gpu(row["gpu"]),
        tensor_parallel_size=int(row["tp"]),
        kv_cache_dtype=row["kv_cache_dtype"],
        max_model_len=int(row["max_model_len"]),
        kv_cache_memory_bytes=kv_bytes,
        vllm_version=row["vllm_version"],
        mamba_cache_mode=row["mamba_cache_mode"],
    )


def test_hybrid_startups_replayed(reference_dir):
    """vllm-hybrid-startup.csv: block size, blocks, KV tokens and max concurrency as logged, given the
    logged KV memory (row 1 to its two decimals of GiB, as in test_budget's layout test)."""
    for row in _hybrid_rows(reference_dir):
        spec = load_model(row["profile"])
        if row["kv_cache_memory_bytes"]:
            plans = [plan_capacity(spec, _hybrid_args(row, int(row["kv_cache_memory_bytes"])))] * 2
        else:
            plans = [plan_capacity(spec, _hybrid_args(row, round((float(row["available_kv_gib"]) + d) * GIB)))
                     for d in (-0.005, 0.005)]
        lo, hi = plans
        assert lo.block_size_tokens == int(row["reported_block_size"]), row["row"]
        assert lo.kv_cache_tokens <= int(row["reported_kv_tokens"]) <= hi.kv_cache_tokens, row["row"]
        if row["reported_num_gpu_blocks"]:
            assert lo.num_gpu_blocks == int(row["reported_num_gpu_blocks"]), row["row"]
        if row["reported_max_concurrency"]:
            assert (
                round(lo.max_concurrency, 2) <= float(row["reported_max_concurrency"]) <= round(hi.max_concurrency, 2)
            )
        if row["reported_padding_pct"]:
            attn_page = (
                lo.block_size_tokens
                * KvLayout.of(spec, row["kv_cache_dtype"], 16, int(row["tp"])).bytes_per_token_per_gpu()
                // 12
            )
            state = KvLayout.of(spec, row["kv_cache_dtype"], 16, int(row["tp"])).state_bytes_per_request_per_gpu() // 36
            assert f"{100 * (attn_page - state) / state:.2f}" == row["reported_padding_pct"]


def test_qwen3_next_tp2_groups(reference_dir):
    """Row 1 by hand: 12 full + 36 GDN layers -> group_size 12, 1 attention + 3 state groups; a block is
    12 pages of 544 x 1,024 B; a 262,144-token request holds cdiv(262144, 544) + 3 = 485 blocks."""
    row = _hybrid_rows(reference_dir)[0]
    plan = plan_capacity(load_model(row["profile"]), _hybrid_args(row, round(44.59 * GIB)))
    assert plan.block_bytes == 12 * 544 * 1024
    assert sorted((g.kind, g.count) for g in plan.groups) == [("full", 1), ("state", 3)]
    assert plan.blocks_per_request == 482 + 3
    assert plan.kv_cache_tokens == (plan.num_gpu_blocks // 4) * 544  # 0.10.2: blocks // groups x block size


def test_prefix_caching_align_mode_doubles_the_state_pages():
    """vLLM 0.28 turns prefix caching on for hybrids in "align" mode: MambaSpec.max_memory_usage_bytes
    becomes 2 pages per state layer (kv_cache_interface.py), so each state group costs 2 blocks."""
    spec = load_model("qwen3-next-80b-a3b-thinking")
    args = EngineArgs(kv_cache_memory_bytes=20 * GIB, tensor_parallel_size=4, max_model_len=8192)
    new, old = plan_capacity(spec, args), plan_capacity(spec, EngineArgs(**{**args.__dict__, "vllm_version": "0.27.1"}))
    assert (new.mamba_cache_mode, old.mamba_cache_mode) == ("align", "none")
    assert new.blocks_per_request - old.blocks_per_request == 3
    assert (
        plan_capacity(spec, EngineArgs(**{**args.__dict__, "mamba_cache_mode": "none"})).blocks_per_request
        == old.blocks_per_request
    )


def test_unified_block_size_respects_a_larger_user_block():
    """--block-size 1024 already holds the state: vLLM keeps it (only raises a block that is too small)."""
    lay = KvLayout.of(load_model("qwen3-next-80b-a3b-thinking"), block_size=1024)
    assert lay.block_size == 1024
    assert unified_block_size(lay.spec, 16, lay.kv_dtype) == 544


def test_state_layers_must_split_over_tp():
    """32 GDN value heads cannot be split 3 ways: one line naming the problem (vLLM's `divide` asserts)."""
    spec = load_model("qwen3-next-80b-a3b-thinking")
    with pytest.raises(KvplanError, match="--tp 3"):
        KvLayout.of(spec, tp=3)


@pytest.mark.parametrize("bad", [{"hybrid_override_pattern": "MMX"}, {"attn_layer_period": 0},
                                 {"layer_types": ["attention", "hyena"]}, {"intermediate_size": [1, "x"]}])
def test_bad_layout_keys_are_one_line_errors(bad):
    base = {"model_type": "nemotron_h" if "hybrid_override_pattern" in bad else "jamba", "num_hidden_layers": 2,
            "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100}
    with pytest.raises(ConfigError):
        spec_from_config({**base, **bad}, "bad")


def test_sweep_agrees_with_the_plan_on_a_hybrid():
    """The vectorised sweep and plan_capacity give the same hybrid figures (both versions' token lines)."""
    from kvplan.plan.sweep import sweep

    spec = load_model("qwen3-next-80b-a3b-thinking")
    for version in ("0.28.0", "0.10.2"):
        base = EngineArgs(tensor_parallel_size=2, vllm_version=version)
        df = sweep(spec, ctx_tokens=[4096, 65_536], concurrency=[1], kv_cache_dtypes=["auto"], block_sizes=[16],
                   gpus=[load_gpu("h200")], base=base)
        for _, r in df.iterrows():
            plan = plan_capacity(
                spec, EngineArgs(**{**base.__dict__, "gpu": load_gpu("h200"), "max_model_len": int(r.ctx)})
            )
            assert (r.num_gpu_blocks, r.kv_cache_tokens) == (plan.num_gpu_blocks, plan.kv_cache_tokens), (
                version,
                r.ctx,
            )


def test_estimate_json_reports_state_apart(capsys):
    """`kvplan estimate --json`: per-token KV of the 12 attention layers only (a calculator counting all
    48 layers says 4x more), the GDN state apart, and vLLM's raised block size at TP 4:
    16 x cdiv(274,432, 16 x 1,024) = 272."""
    from kvplan.cli import main

    with pytest.raises(SystemExit) as info:
        main(["estimate", "--model", "qwen3-next-80b-a3b-thinking", "--gpu", "h100", "--tp", "4", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert info.value.code == 0
    assert data["kv_bytes_per_token"] == 24_576 and data["state_bytes_per_request"] == 39_518_208
    assert data["state_bytes_per_request_per_gpu"] == 36 * (3 * 2048 * 2 + 8 * 128 * 128 * 2)
    assert (data["vllm_block_size"], data["mamba_cache_mode"], data["state_page_bytes"]) == (272, "align", 272 * 1024)
    assert data["attention_layers"] == {"gdn": 36, "full": 12}
