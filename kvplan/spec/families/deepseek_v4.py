"""DeepSeek-V4 Flash / Pro (`model_type: deepseek_v4`), as vLLM deepseek_v4.py and
deepseek_v4_attention.py build it (the cache specs in vllm/v1/kv_cache_interface.py):

    every layer    one 512-wide K = V vector per token (MQA, `num_key_value_heads: 1`) in a
                   128-token sliding window (`sliding_window`), stored in the FlashMLA fp8 layout:
                   448 fp8 "nope" values + 7 ue8m0 scales (one per 64) + 1 pad + 64 bf16 RoPE
                   values = 584 bytes, whatever --kv-cache-dtype says (V4 is served fp8 only)
    compress_ratios[i] = r > 0
                   a compressed cache beside the window: one 584-byte entry per r tokens of the
                   whole request (r = 4: "CSA", sparse over the entries; r = 128: "HCA", dense)
    r = 4          the lightning indexer keeps its own compressed K: 128 fp8 values + one fp32
                   scale = 132 bytes per 4 tokens
    attention      wq_a (hidden -> q_lora_rank), wq_b (-> heads x head_dim), wkv (hidden -> head_dim),
                   a grouped low-rank output (wo_a: o_groups blocks of heads x head_dim / o_groups
                   -> o_lora_rank; wo_b: o_groups x o_lora_rank -> hidden), one sink per head; a
                   compressor (wkv and wgate: hidden -> coff x head_dim, coff 2 for r = 4 whose
                   windows overlap, else 1; an ape of r x coff x head_dim) and, at r = 4, the
                   indexer (wq_b: q_lora_rank -> index heads x index_head_dim, weights_proj, its own
                   compressor at index_head_dim)
    MoE            every layer: `n_routed_experts` of `moe_intermediate_size`, `n_shared_experts`;
                   the first `num_hash_layers` route by a token-id table (no score bias)
    hyper-connections `hc_mult` residual streams: per sub-layer a (2 + m) x m mixing of the m x hidden
                   stream, and one m x hidden head mixing before the LM head
    weights        `quantization_config` fp8 (128 x 128 blocks) and `expert_dtype: fp4`: the routed
                   experts in MXFP4 (4 bits + one e8m0 scale per 32 values: 4.25 bits)

Checked on DeepSeek-V4-Flash (43 layers: 21 with r = 4, 20 with r = 128, 2 window-only):
21 x (584 + 132) / 4 + 20 x 584 / 128 = 3,850.25 B per token for the whole request, plus
43 x 128 x 584 = 3,214,336 B per request in the windows; 284 B parameters, 13 B active, as published.
vLLM's block-pool layout for these caches (page sizes, groups) is not modelled: see
`POOL_NOTE`.
"""
from __future__ import annotations

from typing import Any

from kvplan.errors import ConfigError
from kvplan.spec.cache import CompressedEntries, SlidingWindow
from kvplan.spec.families.family import Family
from kvplan.spec.layer import Layer

ENTRY_BYTES = 448 + 7 + 1 + 64 * 2  # fp8 nope + ue8m0 scales + pad + bf16 rope
INDEXER_ENTRY_BYTES = 128 + 4  # fp8 index K + one fp32 scale
MXFP4_BITS_X100 = 425  # 4 bits + an 8-bit scale per 32 values
FP8_BITS_X100 = 800  # one 32-bit scale per 128 x 128 block is below a hundredth of a bit
SPARSE_RATIO = 4  # the compress ratio whose layers keep the indexer (CSA)


def _ratios(cfg: dict[str, Any], n_layers: int, where: str) -> list[int]:
    """Per decoder layer: 0 (window only) or the compress ratio; entries past the decoder layers are the MTP layers'."""
    ratios = cfg.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < n_layers or \
            any(not isinstance(r, int) or isinstance(r, bool) or r < 0 for r in ratios):
        raise ConfigError(
            f"{where}: compress_ratios must list a non-negative integer for each of the {n_layers} layers"
        )
    return ratios[:n_layers]


def _head_dim(cfg: dict[str, Any], where: str) -> int:
    dim, rope = int(cfg.get("head_dim") or 0), int(cfg.get("qk_rope_head_dim") or 0)
    if dim != 512 or rope != 64:
        raise ConfigError(f"{where}: DeepSeek-V4's cache layout is known for head_dim 512 with qk_rope_head_dim 64, "
                          f"not {dim} / {rope}")
    return dim


def v4_layers(
    cfg: dict[str, Any], n_layers: int, n_heads: int, head_dim: int, where: str
) -> tuple[Layer, ...]:
    dim = _head_dim(cfg, where)
    window = int(cfg.get("sliding_window") or 0)
    if window <= 0:
        raise ConfigError(f"{where}: DeepSeek-V4 needs sliding_window (tokens of the uncompressed window)")
    out = []
    for r in _ratios(cfg, n_layers, where):
        compressed = (ENTRY_BYTES + (INDEXER_ENTRY_BYTES if r == SPARSE_RATIO else 0)) if r else 0
        entries = SlidingWindow(1, dim, 0, fixed_entry_bytes=ENTRY_BYTES, window_tokens=window)
        out.append(Layer.of(entries, CompressedEntries(r, compressed)) if r else Layer.of(entries))
    return tuple(out)


def _compressor(hidden: int, dim: int, ratio: int) -> int:
    coff = 2 if ratio == SPARSE_RATIO else 1
    return 2 * hidden * coff * dim + ratio * coff * dim + dim  # wkv, wgate, ape, norm


def v4_counts(cfg: dict[str, Any], n_layers: int, hidden: int, n_heads: int, head_dim: int, vocab: int,
              where: str) -> dict[str, int]:
    dim = _head_dim(cfg, where)
    q_rank, o_rank = int(cfg["q_lora_rank"]), int(cfg["o_lora_rank"])
    hc = int(cfg.get("hc_mult") or 1)
    idx_heads, idx_dim = int(cfg.get("index_n_heads") or 0), int(cfg.get("index_head_dim") or 0)
    n_exp, k = int(cfg["n_routed_experts"]), int(cfg["num_experts_per_tok"])
    expert = 3 * hidden * int(cfg["moe_intermediate_size"])
    hash_layers = int(cfg.get("num_hash_layers") or 0)
    attention = mlp_dense = 0
    for i, r in enumerate(_ratios(cfg, n_layers, where)):
        attention += (hidden * q_rank + q_rank + q_rank * n_heads * dim + hidden * dim + dim
                      + n_heads * dim * o_rank + o_rank * hidden * int(cfg.get("o_groups") or 1) + n_heads)
        if r:
            attention += _compressor(hidden, dim, r)
        if r == SPARSE_RATIO and idx_heads:
            attention += q_rank * idx_heads * idx_dim + hidden * idx_heads + _compressor(hidden, idx_dim, r)
        mlp_dense += int(cfg.get("n_shared_experts") or 0) * expert + hidden * n_exp + (0 if i < hash_layers else n_exp)
    mix = (2 + hc) * hc
    hyper = n_layers * 2 * (mix * hc * hidden + mix + 3) + hc * hc * hidden + hc + 1 if hc > 1 else 0
    return dict(embedding=vocab * hidden, lm_head=0 if cfg.get("tie_word_embeddings") else vocab * hidden,
                attention=attention, mlp_dense=mlp_dense + hyper, experts=n_layers * n_exp * expert,
                experts_active=n_layers * k * expert, norms=(2 * n_layers + 1) * hidden)


def v4_fp8_groups(cfg: dict[str, Any]) -> tuple[tuple[str, int, int], ...]:
    """`expert_dtype: fp4` beside an fp8 `quantization_config`: the routed experts are MXFP4 in the
    checkpoint (DeepSeek's own release); a ModelOpt re-quantization says its own groups."""
    if cfg.get("expert_dtype") != "fp4":
        return ()
    return tuple(
        (g, MXFP4_BITS_X100 if g == "experts" else FP8_BITS_X100, 100) for g in ("attention", "mlp_dense", "experts")
    )


POOL_NOTE = ("DeepSeek-V4's caches are planned from its layout (a 128-token fp8 window per layer, compressed "
            "entries per 4 or 128 tokens, the indexer's K), exact per request; vLLM's block-pool layout for them "
            "(page sizes and KV-cache groups) is not modelled, so the pool is the KV budget over one request's paged "
            "bytes in blocks of a multiple of 128 tokens, not vLLM's block count")


FAMILY = Family(
    frozenset({"deepseek_v4"}),
    "vllm/model_executor/models/deepseek_v4.py",
    checked="hand",
    layers=v4_layers,
    counts=v4_counts,
    fp8_groups=v4_fp8_groups,
    note=POOL_NOTE,
    read_keys=frozenset(
        {
            "compress_ratios",
            "hc_mult",
            "hc_eps",
            "hc_sinkhorn_iters",
            "num_hash_layers",
            "o_groups",
            "o_lora_rank",
            "expert_dtype",
            "compress_rope_theta",
            "swiglu_limit",
            "index_n_heads",
            "index_head_dim",
            "index_topk",
        }
    ),
    architectures=frozenset({"DeepseekV4ForCausalLM"}),
)
