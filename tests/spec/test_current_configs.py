"""The 2026 configs AIConfigurator ships (copies in tests/data/aiconfigurator, Apache-2.0): each one
plans, what kvplan does not model is named in a warning (never planned silently as a plain decoder),
and checkpoint quantization is read as vLLM reads it (ModelOpt `hf_quant_config.json`,
`quantization_config`; vllm/model_executor/layers/quantization/modelopt.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvplan.cli import main
from kvplan.errors import ConfigError
from kvplan.plan.kv import KvLayout
from kvplan.spec.config_keys import unread_keys
from kvplan.spec.model import spec_from_config
from kvplan.spec.profiles import load_model

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "aiconfigurator" / "model_configs"
MODELS = sorted(p.name.removesuffix("_config.json") for p in CONFIGS.glob("*_config.json")
                if not p.name.endswith("_hf_quant_config.json"))


def model_dir(tmp_path: Path, name: str) -> Path:
    """A local model directory as a user has it: config.json (+ hf_quant_config.json)."""
    d = tmp_path / name
    d.mkdir()
    shutil.copy(CONFIGS / f"{name}_config.json", d / "config.json")
    quant = CONFIGS / f"{name}_hf_quant_config.json"
    if quant.exists():
        shutil.copy(quant, d / "hf_quant_config.json")
    return d


def test_the_copies_are_there() -> None:
    assert len(MODELS) == 88  # 89 in the wheel; MiniMax-M3-NVFP4 left out for size (SOURCES.md)


@pytest.mark.parametrize("name", MODELS)
def test_every_current_config_plans(tmp_path: Path, name: str) -> None:
    spec = load_model(str(model_dir(tmp_path, name)))
    layout = KvLayout.of(spec, "auto", 16)
    assert layout.bytes_per_token() + layout.state_bytes_per_request() > 0
    assert spec.weights_bytes > 0


@pytest.mark.parametrize("name, keys", [
    ("moonshotai--Kimi-K3", {"mla_use_nope", "mla_use_output_gate", "attn_res_block_size"}),
])
def test_unmodelled_layouts_are_named(tmp_path: Path, name: str, keys: set[str], capsys) -> None:
    d = model_dir(tmp_path, name)
    spec = load_model(str(d))
    assert spec.warnings and keys <= set(unread_keys(spec.config, spec.config.get("text_config") or spec.config))
    assert all(k in spec.warnings[0] for k in keys)
    with pytest.raises(SystemExit) as info:
        main(["estimate", "--model", str(d), "--json"])
    out, err = capsys.readouterr()
    assert info.value.code == 0 and all(k in err for k in keys) and json.loads(out)["warnings"] == list(spec.warnings)
    with pytest.raises(SystemExit) as info:
        main(["estimate", "--model", str(d), "--strict"])
    assert info.value.code == 2 and "--strict" in capsys.readouterr().err


def test_a_made_up_layout_key_is_named_and_known_ones_are_not() -> None:
    base = json.loads((CONFIGS / "meta-llama--Meta-Llama-3.1-8B_config.json").read_text())
    assert spec_from_config(base, "llama").warnings == ()
    spec = spec_from_config({**base, "fancy_layer_ratio": 4, "temperature": 0.7}, "llama")
    assert len(spec.warnings) == 1 and "fancy_layer_ratio" in spec.warnings[0] and "temperature" not in spec.warnings[0]
    # a key that changes nothing at the value the plan assumes: only another value is named
    assert spec_from_config({**base, "add_cross_attention": False}, "llama").warnings == ()
    assert "add_cross_attention" in spec_from_config({**base, "add_cross_attention": True}, "llama").warnings[0]


def test_qwen3_coder_has_no_shared_expert() -> None:
    """`shared_expert_intermediate_size: 0` (vLLM qwen3_moe.py builds no shared expert): 480 B, as published."""
    spec = spec_from_config(
        json.loads((CONFIGS / "Qwen--Qwen3-Coder-480B-A35B-Instruct_config.json").read_text()), "coder"
    )
    assert round(spec.params.total / 1e9) == 480
    assert KvLayout.of(spec, "auto", 16).bytes_per_token() == 2 * 62 * 8 * 128 * 2  # K and V, 62 layers, 8 KV heads


def test_modelopt_fp8_checkpoint(tmp_path: Path) -> None:
    """nvidia/Llama-3.1-70B-Instruct-FP8: hf_quant_config.json says FP8 weights (lm_head excluded)
    and an FP8 KV cache, which vLLM's `--kv-cache-dtype auto` then uses."""
    spec = load_model(str(model_dir(tmp_path, "nvidia--Llama-3.1-70B-Instruct-FP8")))
    p = spec.params
    assert spec.weights_bytes == (p.total - p.linear) * 2 + p.linear  # linear layers 1 B, the rest bf16
    assert KvLayout.of(spec, "auto", 16).bytes_per_token() == 80 * 8 * 128 * 2 * 1  # fp8 K and V
    assert KvLayout.of(spec, "bfloat16", 16).bytes_per_token() == 80 * 8 * 128 * 2 * 2  # asked for: bf16


def test_modelopt_nvfp4_with_excluded_attention(tmp_path: Path) -> None:
    """nvidia/GLM-5-NVFP4: NVFP4 (4 bits + an FP8 scale per 16 values: 4.5 bits) everywhere but the
    excluded modules, which are every layer's self_attn (q/kv projections, o_proj, indexer): bf16."""
    spec = load_model(str(model_dir(tmp_path, "nvidia--GLM-5-NVFP4")))
    p = spec.params
    expected_x800 = ((p.total - p.linear) * 2 + p.attention * 2) * 800 + (p.mixer + p.mlp_dense + p.experts) * 450
    assert spec.weights_bytes == (expected_x800 + 799) // 800
    assert spec.weights_bytes < 0.31 * p.total * 2  # was weighed as bf16 (1,488 GB); now ~441 GB


def test_mixed_precision_checkpoint(tmp_path: Path) -> None:
    """nvidia/Qwen3.6-35B-A3B-NVFP4, MIXED_PRECISION: only the listed modules are converted, each by
    its own algorithm (FP8 attention and linear-attention mixers, NVFP4 experts), all of them on
    the layers that hold them (10 attention and 30 Gated-DeltaNet of 40). Its config.json carries
    its own quantization_config, which vLLM reads before hf_quant_config.json: that one says no KV
    quantization, so `auto` stays bf16 (the FP8 KV cache of hf_quant_config.json is not used)."""
    spec = load_model(str(model_dir(tmp_path, "nvidia--Qwen3.6-35B-A3B-NVFP4")))
    groups = {group: (b, pct) for group, b, pct in spec.quant.groups}
    assert groups["experts"] == (450, 100) and groups["attention"] == (800, 100) and groups["mixer"] == (800, 100)
    assert spec.quant.kv_cache_dtype is None and KvLayout.of(spec, "auto", 16).kv_dtype.name == "bfloat16"
    assert spec.weights_bytes < 0.4 * spec.params.total * 2


def test_kv_cache_scheme_in_config_json(tmp_path: Path) -> None:
    """nvidia/Qwen3.6-27B-NVFP4's quantization_config declares an FP8 `kv_cache_scheme`: auto is fp8."""
    spec = load_model(str(model_dir(tmp_path, "nvidia--Qwen3.6-27B-NVFP4")))
    assert spec.quant.kv_cache_dtype == "fp8" and KvLayout.of(spec, "auto", 16).kv_dtype.name == "fp8"


def test_nemotron_nas_blocks() -> None:
    """Llama-3.3-Nemotron-Super-49B-v1 as vLLM nemotron_nas.py builds it from block_configs: 31
    no-op attention blocks (no KV), 49 with 64 // 8 = 8 KV heads, per-block FFN widths."""
    from kvplan.spec.families.nemotron_nas import ffn_intermediate

    config = json.loads((CONFIGS / "nvidia--Llama-3_3-Nemotron-Super-49B-v1_config.json").read_text())
    spec = spec_from_config(config, "nas")
    assert spec.warnings == ()
    assert KvLayout.of(spec, "auto", 16).bytes_per_token() == 49 * 2 * 8 * 128 * 2 == 200_704
    # the hand count: embeddings and LM head, 49 attention blocks, each FFN by its multiplier, norms
    h, vocab = 8192, 128256
    attention = 49 * (2 * h * h + 2 * h * 1024)
    widths = {5.25: 28672, 1.3125: 7168, 1.0: 5632, 2.625: 14336, 0.5: 2816, 3.28125: 17920}
    assert all(ffn_intermediate(m, h) == w for m, w in widths.items())
    mults = [b["ffn"]["ffn_mult"] for b in config["block_configs"]]
    mlp = sum(3 * h * widths[m] for m in mults)
    norms = (49 + 80 + 1) * h
    assert spec.params.total == 2 * vocab * h + attention + mlp + norms
    assert round(spec.params.total / 1e9, 2) == 49.87


@pytest.mark.parametrize("name, total_b, active_b", [
    ("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8", 120.7, 12.8),
    ("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", 549.3, 56.1),
])
def test_latent_moe(name: str, total_b: float, active_b: float) -> None:
    """Nemotron-3's latent MoE (vLLM nemotron_h.py `moe_latent_size`): the routed experts (relu^2,
    up and down) work at the latent width, entered and left through a hidden x latent projection
    each per MoE layer; the shared expert stays at hidden width. The names say 120B/A12B and 550B/A55B."""
    config = json.loads((CONFIGS / f"{name}_config.json").read_text())
    spec = spec_from_config(config, "n3")
    assert spec.warnings == ()
    latent, inter, hidden = config["moe_latent_size"], config["moe_intermediate_size"], config["hidden_size"]
    pattern = config.get("hybrid_override_pattern") or config["layers_block_type"]  # "E" per MoE layer, or "moe"
    moe_layers = pattern.count("E") if isinstance(pattern, str) else pattern.count("moe")
    assert spec.params.experts == moe_layers * config["n_routed_experts"] * 2 * latent * inter
    assert round(spec.params.total / 1e9, 1) == total_b and round(spec.params.active / 1e9, 1) == active_b
    assert 2 * hidden * latent * moe_layers < spec.params.mlp_dense  # the latent projections are counted


def test_mimo_v2_flash_hybrid_sliding_window() -> None:
    """MiMo-V2-Flash as vLLM mimo_v2_flash.py builds it: 9 full layers (4 KV heads) and 39 sliding
    ones (8 KV heads, window 128), V padded to the 192-wide K head in the cache; 309 B / 15 B active."""
    config = json.loads((CONFIGS / "XiaomiMiMo--MiMo-V2-Flash_config.json").read_text())
    spec = spec_from_config(config, "mimo")
    assert spec.warnings == ()
    assert config["hybrid_layer_pattern"].count(0) == 9 and config["hybrid_layer_pattern"].count(1) == 39
    layout = KvLayout.of(spec, "auto", 16)
    full, sliding = 9 * 4 * 2 * 192 * 2, 39 * 8 * 2 * 192 * 2
    assert layout.bytes_per_token() == full + sliding == 267_264
    # at 256k tokens the full layers hold every token, the sliding ones their window (in 16-token blocks)
    per_request = layout.request_bytes(262_144)
    assert full * 262_144 < per_request < full * 262_144 + sliding * (128 + 2 * 16)
    assert round(spec.params.total / 1e9) == 309 and round(spec.params.active / 1e9) == 15


def test_glm5_indexers_and_default_kv() -> None:
    """GLM-5.2 keeps a sparse-attention indexer on the 21 layers `indexer_types` marks "full" (the
    "shared" ones reuse an earlier layer's top-k: no indexer weights, no indexer cache); vLLM caches
    GLM's MLA latent in the model dtype under `auto` (fp8_ds_mla is DeepSeek-V3.2's default only)
    and in fp8_ds_mla when fp8 is asked for."""
    glm52 = spec_from_config(json.loads((CONFIGS / "zai-org--GLM-5.2_config.json").read_text()), "glm52")
    glm5 = spec_from_config(json.loads((CONFIGS / "zai-org--GLM-5_config.json").read_text()), "glm5")
    assert glm52.warnings == () and glm5.warnings == ()
    indexer = 128 + 4  # fp8 K of index_head_dim 128 + one fp32 scale
    assert KvLayout.of(glm52, "auto", 64).bytes_per_token() == 78 * 576 * 2 + 21 * indexer == 92_628
    assert KvLayout.of(glm5, "auto", 64).bytes_per_token() == 78 * (576 * 2 + indexer)
    assert KvLayout.of(glm52, "fp8", 64).kv_dtype.name == "fp8_ds_mla"
    assert KvLayout.of(glm52, "fp8", 64).bytes_per_token() == 78 * 656 + 21 * indexer
    # the 57 layers without an indexer hold none of its weights: wq_b, wk, k_norm, weights_proj
    c = glm52.config
    h, q_rank, n, d = c["hidden_size"], c["q_lora_rank"], c["index_n_heads"], c["index_head_dim"]
    assert glm5.params.attention - glm52.params.attention == 57 * (q_rank * n * d + h * d + 2 * d + h * n)
    deepseek = spec_from_config(json.loads((CONFIGS / "deepseek-ai--DeepSeek-V3.2_config.json").read_text()), "v32")
    assert KvLayout.of(deepseek, "auto", 64).kv_dtype.name == "fp8_ds_mla"


def test_compressed_tensors_ignore_list() -> None:
    """moonshotai/Kimi-K2.5 (compressed-tensors, 4-bit groups of 32): its `ignore` list keeps every
    self_attn, the shared experts and the dense MLPs in bf16 (`re:` patterns); only the routed
    experts are int4 (4 bits + a 16-bit scale per 32 values: 4.5 bits)."""
    config = json.loads((CONFIGS / "moonshotai--Kimi-K2.5_config.json").read_text())
    spec = spec_from_config(config, "k25")
    p, groups = spec.params, {g: (b, pct) for g, b, pct in spec.quant.groups}
    assert groups["attention"][1] == 0 and groups["mlp_dense"][1] == 0 and groups["experts"][1] == 100
    bits = groups["experts"][0]
    assert spec.weights_bytes == ((p.total - p.experts) * 2 * 800 + p.experts * bits + 799) // 800


@pytest.mark.parametrize(
    "name, layers, sparse, dense_r, window_only, total_b, active_b",
    [
        ("deepseek-ai--DeepSeek-V4-Flash", 43, 21, 20, 2, 284.3, 13.8),  # published: 284 B, 13 B active
        ("deepseek-ai--DeepSeek-V4-Pro", 61, 30, 31, 0, 1573.0, 49.8),  # published: 1.6 T, 49 B active
        (
            "sgl-project--DeepSeek-V4-Flash-FP8",
            43,
            21,
            20,
            2,
            284.3,
            13.8,
        ),  # model_type deepseek_ref: found by architecture
    ],
)
def test_deepseek_v4_compressed_caches(name: str, layers: int, sparse: int, dense_r: int, window_only: int,
                                       total_b: float, active_b: float) -> None:
    """DeepSeek-V4 as vLLM deepseek_v4_attention.py caches it: every layer a 128-token window of
    584-byte fp8 entries (448 fp8 + 7 ue8m0 scales + 1 pad + 64 bf16 RoPE values), a compressed
    cache of one 584-byte entry per 4 tokens (CSA layers, with the indexer's 132-byte K per 4 tokens)
    or per 128 tokens (HCA layers). The cache grows ~3,850 B (Flash) / ~5,511 B (Pro) per token
    beyond a fixed 3.2 / 4.6 MB of windows: ~508 MB per request at 128k for Flash, not a flat 11.3 MB."""
    config = json.loads((CONFIGS / f"{name}_config.json").read_text())
    spec = spec_from_config(config, "v4")
    ratios = config["compress_ratios"][:layers]
    assert (ratios.count(4), ratios.count(128), ratios.count(0)) == (sparse, dense_r, window_only)
    layout = KvLayout.of(spec, "auto", 16)
    assert layout.block_size == 128  # whole compressed entries per block (an assumption, warned)
    growth_x128 = sparse * (584 + 132) * 32 + dense_r * 584  # bytes per 128 tokens beyond the windows
    window = layers * 128 * 584
    tokens = 131_072
    assert layout.request_bytes(tokens, paged=False) == window + tokens // 128 * growth_x128
    assert layout.request_bytes(tokens) == window + tokens // 128 * growth_x128  # 128k is whole blocks
    assert layout.bytes_per_token() == layers * 584 + -(-growth_x128 // 128)
    if name.endswith("Flash"):
        assert round(growth_x128 / 128, 2) == 3850.25 and window == 3_214_336
        assert 507e6 < layout.request_bytes(tokens) < 509e6
    assert round(spec.params.total / 1e9, 1) == total_b and round(spec.params.active / 1e9, 1) == active_b
    assert layout.kv_dtype.name == "fp8_ds_mla" and any("block-pool layout" in w for w in spec.warnings)
    with pytest.raises(ConfigError, match="fp8 layout only"):
        spec.kv_dtype("bfloat16")


def test_deepseek_v4_checkpoint_weights() -> None:
    """DeepSeek's own V4 release: fp8 (128 x 128 blocks) with `expert_dtype: fp4`, the routed experts
    in MXFP4 (4.25 bits): ~155 GB for Flash, not 292 GB of fp8 (sgl-project's FP8 re-release: fp8 experts)."""
    own = spec_from_config(json.loads((CONFIGS / "deepseek-ai--DeepSeek-V4-Flash_config.json").read_text()), "v4")
    sgl = spec_from_config(json.loads((CONFIGS / "sgl-project--DeepSeek-V4-Flash-FP8_config.json").read_text()), "v4")
    p = own.params
    assert (
        own.weights_bytes
        == ((p.total - p.linear) * 2 * 800 + (p.attention + p.mlp_dense) * 800 + p.experts * 425 + 799) // 800
    )
    assert 150e9 < own.weights_bytes < 160e9 and sgl.weights_bytes > 1.8 * own.weights_bytes


def test_minimax_m3_index_keys() -> None:
    """MiniMax-M3: 60 full-attention layers of 4 KV heads x 128, and on the 57 layers
    `sparse_attention_freq` marks, one 128-element index key per token (no index value:
    `sparse_disable_index_value`); dense MLPs of `dense_intermediate_size` on the first 3 layers."""
    config = json.loads((CONFIGS / "MiniMaxAI--MiniMax-M3_config.json").read_text())
    spec = spec_from_config(config, "m3")
    sac = config["sparse_attention_config"]
    assert sum(sac["sparse_attention_freq"]) == 57 and sac["sparse_disable_index_value"] == sac["sparse_attention_freq"]
    assert KvLayout.of(spec, "auto", 16).bytes_per_token() == 60 * 2 * 4 * 128 * 2 + 57 * 128 * 2 == 137_472
    assert KvLayout.of(spec, "fp8", 16).bytes_per_token() == 137_472 // 2
    h = config["hidden_size"]
    assert (
        spec.params.mlp_dense - 57 * (3 * h * 3072 + 128 * h + 128) == 3 * 3 * h * 12288
    )  # dense layers, shared experts, routers
    assert spec.params.experts == 57 * 128 * 3 * h * 3072
    assert [w for w in spec.warnings if "config keys" in w] == [] and any("index keys" in w for w in spec.warnings)


def test_step3p7_shared_expert_and_kimi_k3_latent_experts() -> None:
    """Step-3.7-Flash's `share_expert_dim` is read (its shared expert's width; 196 B parameters as
    published), and Kimi-K3's routed experts work at `routed_expert_hidden_size` (a latent MoE like
    Nemotron-3's): 896 x 3 x 3,584 x 3,072 per MoE layer, not at the 7,168 hidden width."""
    step = spec_from_config(json.loads((CONFIGS / "stepfun-ai--Step-3.7-Flash_config.json").read_text()), "step")
    assert step.warnings == () and round(step.params.total / 1e9) == 196
    config = json.loads((CONFIGS / "moonshotai--Kimi-K3_config.json").read_text())
    kimi = spec_from_config(config, "k3")
    t = config.get("text_config", config)
    moe_layers = t["num_hidden_layers"] - t["first_k_dense_replace"]
    assert (
        kimi.params.experts
        == moe_layers * t["num_experts"] * 3 * t["routed_expert_hidden_size"] * t["moe_intermediate_size"]
    )
