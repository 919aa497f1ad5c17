"""The layer-layout rules: what each decoder layer caches (a `Layer` of cache kinds,
kvplan.spec.layer and kvplan.spec.cache), read from the layout keys of a config.json, as vLLM builds
each layer's `KVCacheSpec`. A layer may hold a fixed per-request state (MambaSpec) on its own or
beside its attention (Falcon-H1, whose layers run attention and Mamba2 in parallel; Zamba2's hybrid
layers); Gemma-3n's `num_kv_shared_layers` read another layer's cache and hold none.

Layout keys read: `layer_types` (gpt-oss, Gemma 2/3/3n, Qwen3-Next/3.5 `linear_attention`,
Granite-4.0-H/Bamba `mamba`, LFM2 `conv`, MiniMax `linear_attention`), `full_attn_idxs` (LFM2),
`attn_type_list` (MiniMax-Text-01/M1), `layers_block_type` (Zamba2 mamba / hybrid),
`linear_attn_config.kda_layers` (Kimi-Linear), `attn_layer_indices` (Bamba),
`hybrid_override_pattern` (Nemotron-H: M mamba, * attention, - MLP, E MoE), `attn_layer_period`/`attn_layer_offset`
(Jamba), `attention_chunk_size` with
`no_rope_layers` (Llama-4: the NoPE layers, every 4th by default, are full), `cross_attention_layers`
(Llama-3.2-Vision), `num_kv_shared_layers` (Gemma-3n), Gemma 4's `global_head_dim` /
`num_global_key_value_heads` on its full layers, and the sliding-window conventions of
Mistral, Qwen2, Gemma 2/3 and Cohere2.
"""
from __future__ import annotations

from typing import Any

from kvplan.errors import ConfigError
from kvplan.spec.cache import ChunkedLocal, CrossAttention, FullAttention, RecurrentState, SlidingWindow
from kvplan.spec.gemma4_params import GEMMA4_TYPES, layer_geometry
from kvplan.spec.layer import Layer
from kvplan.spec.state import (
    gated_delta_net_state,
    linear_attention_state,
    mamba1_state,
    mamba2_state,
    short_conv_state,
)

MAMBA1_TYPES = {"mamba", "falcon_mamba"}  # attention-free Mamba v1 checkpoints
MAMBA2_TYPES = {"mamba2"}  # attention-free Mamba2 checkpoints
ATTENTION_FREE_TYPES = MAMBA1_TYPES | MAMBA2_TYPES

# Families whose configs carry a `sliding_window` that applies to every layer when set.
_QWEN_TYPES = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl", "qwen2_5_vl"}
_LAYER_TYPE_WORDS = {
    "full_attention": "full", "attention": "full", "global": "full", "global_attention": "full",
    "sliding_attention": "sliding", "local_attention": "sliding", "sliding": "sliding",
    "chunked_attention": "chunked", "linear_attention": "linear", "mamba": "linear",
    "conv": "short_conv",  # LFM2: a gated short convolution (vLLM lfm2.py: anything not full_attention)
}
LFM2_TYPES = {"lfm2", "lfm2_moe"}
MINIMAX_TYPES = {"minimax", "minimax_text_01", "minimax_m1"}  # lightning (linear) attention hybrids


def _window(cfg: dict[str, Any]) -> int | None:
    window = cfg.get("sliding_window")
    return int(window) if isinstance(window, (int, float)) and not isinstance(window, bool) and window > 0 else None


def layer_windows(cfg: dict[str, Any], n_layers: int, max_pos: int) -> list[int | None]:
    """Per layer: the sliding window in tokens, or None for full attention (no `layer_types`)."""
    window, model_type = _window(cfg), str(cfg.get("model_type", ""))
    if window is None or (max_pos and window >= max_pos):
        return [None] * n_layers  # a window as long as the context is full attention (Phi-4)
    if model_type in _QWEN_TYPES:
        if not cfg.get("use_sliding_window", False):
            return [None] * n_layers
        first = int(cfg.get("max_window_layers", 0))
        return [window if i >= first else None for i in range(n_layers)]
    if model_type == "gemma2":
        return [window if i % 2 == 0 else None for i in range(n_layers)]
    if model_type in ("gemma3_text", "gemma3", "cohere2"):
        pattern = int(cfg.get("sliding_window_pattern") or (6 if model_type != "cohere2" else 4))
        return [None if (i + 1) % pattern == 0 else window for i in range(n_layers)]
    return [window] * n_layers  # Mistral v0.1, Phi-3, Starcoder2: every layer


# --- layer types, one word per layer -----------------------------------------------------------
def _from_layer_types(cfg: dict[str, Any], n_layers: int, where: str) -> list[str]:
    types = cfg["layer_types"]
    if len(types) != n_layers:
        raise ConfigError(f"{where}: layer_types has {len(types)} entries but num_hidden_layers is {n_layers}")
    # a linear / mamba layer is Gated-DeltaNet in Qwen3-Next / Qwen3.5, Mamba2 in Granite-4.0-H / Bamba
    linear = "gdn" if cfg.get("linear_num_value_heads") is not None else "mamba2"
    words = []
    for t in types:
        word = _LAYER_TYPE_WORDS.get(str(t))
        if word is None:
            raise ConfigError(f"{where}: unsupported layer type {t!r} in layer_types; "
                              f"known: {', '.join(sorted(_LAYER_TYPE_WORDS))}")
        words.append(linear if word == "linear" else word)
    return words


def _from_pattern(cfg: dict[str, Any], n_layers: int, where: str) -> list[str]:
    """Nemotron-H `hybrid_override_pattern`: one character per layer."""
    pattern = str(cfg["hybrid_override_pattern"])
    mapping = {"M": "mamba2", "*": "full", "-": "mlp", "E": "mlp"}
    if len(pattern) != n_layers or set(pattern) - set(mapping):
        raise ConfigError(f"{where}: hybrid_override_pattern {pattern!r} must have {n_layers} characters "
                          "out of M (mamba), * (attention), - (MLP), E (MoE)")
    return [mapping[c] for c in pattern]


def _from_period(cfg: dict[str, Any], n_layers: int, where: str) -> list[str]:
    """Jamba: attention where `i % attn_layer_period == attn_layer_offset`, Mamba v1 elsewhere."""
    period, offset = cfg.get("attn_layer_period"), cfg.get("attn_layer_offset", 0)
    if not isinstance(period, int) or period <= 0 or not isinstance(offset, int) or not 0 <= offset < period:
        raise ConfigError(f"{where}: attn_layer_period={period!r} / attn_layer_offset={offset!r} must be "
                          "integers with 0 <= offset < period")
    return ["full" if i % period == offset else "mamba1" for i in range(n_layers)]


def _minimax(cfg: dict[str, Any], n_layers: int, where: str) -> list[str]:
    """MiniMax-Text-01 / M1 (vLLM minimax_text_01.py): `attn_type_list` (or `decoder_attention_types`),
    0 = lightning linear attention, 1 = softmax attention; else transformers' `layer_types`; else all
    softmax. The softmax layers ignore `sliding_window` (vLLM does not pass it to Attention)."""
    flags = cfg.get("attn_type_list") or cfg.get("decoder_attention_types")
    if flags:
        if len(flags) != n_layers or set(flags) - {0, 1}:
            raise ConfigError(f"{where}: attn_type_list must hold {n_layers} entries of 0 (linear) or 1 (full)")
        return ["full" if flag == 1 else "linear" for flag in flags]
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        words = {"full_attention": "full", "linear_attention": "linear"}
        if len(types) != n_layers or set(types) - set(words):
            raise ConfigError(
                f"{where}: layer_types must hold {n_layers} entries of full_attention or linear_attention"
            )
        return [words[t] for t in types]
    return ["full"] * n_layers


def _zamba2(cfg: dict[str, Any], n_layers: int, where: str) -> list[str]:
    """Zamba2 (vLLM zamba2.py): every layer runs a Mamba2 mixer; a "hybrid" layer also runs the shared
    attention block, whose weights are shared but whose KV cache is its own."""
    blocks = cfg.get("layers_block_type")
    if blocks is None and isinstance(cfg.get("hybrid_layer_ids"), list):
        blocks = ["hybrid" if i in set(cfg["hybrid_layer_ids"]) else "mamba" for i in range(n_layers)]
    # transformers 5 writes the Mamba layers as "linear_attention"
    if not isinstance(blocks, list) or len(blocks) != n_layers or set(blocks) - {"mamba", "linear_attention", "hybrid"}:
        raise ConfigError(f"{where}: Zamba2 needs layers_block_type: {n_layers} entries of mamba or hybrid")
    return ["full+mamba2" if b == "hybrid" else "mamba2" for b in blocks]


def kda_layer_indexes(cfg: dict[str, Any], n_layers: int, where: str) -> set[int]:
    """Kimi-Linear: the KDA (linear) layers, 0-based. vLLM kimi_linear.py reads the checkpoint's
    `linear_attn_config.kda_layers` (1-based; every other layer is MLA); transformers 5 writes `layer_types`."""
    if str(cfg.get("model_type", "")) != "kimi_linear":
        return set()
    lin = cfg.get("linear_attn_config")
    if isinstance(lin, dict) and lin.get("kda_layers") is not None:
        kda = lin["kda_layers"]
        if not isinstance(kda, list) or not all(isinstance(i, int) and 1 <= i <= n_layers for i in kda):
            raise ConfigError(f"{where}: linear_attn_config.kda_layers must list layer numbers 1..{n_layers}")
        return {i - 1 for i in kda}
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) != n_layers or set(types) - {"full_attention", "linear_attention"}:
            raise ConfigError(
                f"{where}: layer_types must hold {n_layers} entries of full_attention or linear_attention"
            )
        return {i for i, t in enumerate(types) if t == "linear_attention"}
    return set()


def _llama4_chunked(cfg: dict[str, Any], n_layers: int) -> list[str]:
    """Llama-4: RoPE layers attend within `attention_chunk_size` chunks; NoPE layers
    (`no_rope_layers[i] == 0`, by default every 4th) attend to everything (vLLM llama4.py)."""
    no_rope = cfg.get("no_rope_layers")
    if not isinstance(no_rope, list) or len(no_rope) != n_layers:
        interval = int(cfg.get("no_rope_layer_interval") or 4)
        no_rope = [int((i + 1) % interval != 0) for i in range(n_layers)]
    return ["chunked" if uses_rope else "full" for uses_rope in no_rope]


def layer_words(cfg: dict[str, Any], n_layers: int, max_pos: int, where: str) -> list[str]:
    """One word per layer: full, sliding, chunked, cross, mlp, mamba1, mamba2, gdn, short_conv, linear or
    full+mamba2."""
    model_type = str(cfg.get("model_type", ""))
    if model_type in ATTENTION_FREE_TYPES:
        return ["mamba1" if model_type in MAMBA1_TYPES else "mamba2"] * n_layers
    if model_type == "falcon_h1":
        return ["full+mamba2"] * n_layers  # attention and Mamba2 side by side in every layer
    if model_type in MINIMAX_TYPES:
        return _minimax(cfg, n_layers, where)
    if model_type == "zamba2":
        return _zamba2(cfg, n_layers, where)
    if model_type in LFM2_TYPES and not cfg.get("layer_types"):
        # transformers' Lfm2Config: attention at full_attn_idxs (default: every layer), short conv elsewhere
        full = cfg.get("full_attn_idxs")
        full = set(range(n_layers)) if full is None else set(full)
        return ["full" if i in full else "short_conv" for i in range(n_layers)]
    if model_type == "bamba" and not cfg.get("layer_types"):
        attn = set(cfg.get("attn_layer_indices") or [])  # Bamba: attention at attn_layer_indices, Mamba2 elsewhere
        return ["full" if i in attn else "mamba2" for i in range(n_layers)]
    if cfg.get("hybrid_override_pattern"):
        return _from_pattern(cfg, n_layers, where)
    if cfg.get("attn_layer_period") is not None:
        return _from_period(cfg, n_layers, where)
    if isinstance(cfg.get("layer_types"), list) and cfg["layer_types"]:
        return _from_layer_types(cfg, n_layers, where)
    if cfg.get("linear_num_value_heads") is not None:
        # Qwen3-Next / Qwen3.5 without layer_types: transformers' default, every
        # `full_attention_interval`-th layer full, Gated-DeltaNet linear attention elsewhere
        interval = int(cfg.get("full_attention_interval") or 4)
        return ["full" if (i + 1) % interval == 0 else "gdn" for i in range(n_layers)]
    if cfg.get("attention_chunk_size") and model_type.startswith("llama4"):
        return _llama4_chunked(cfg, n_layers)
    cross = cfg.get("cross_attention_layers")
    if isinstance(cross, list) and cross:
        return ["cross" if i in set(cross) else "full" for i in range(n_layers)]
    return ["sliding" if w else "full" for w in layer_windows(cfg, n_layers, max_pos)]


def _encoder_tokens(outer: dict[str, Any], where: str) -> int:
    """Encoder tokens one request's cross-attention layers cache (Mllama: tiles x (patches + CLS))."""
    vision = outer.get("vision_config") or {}
    try:
        patches = (int(vision["image_size"]) // int(vision["patch_size"])) ** 2 + 1
        return int(vision.get("max_num_tiles") or 4) * patches
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        raise ConfigError(f"{where}: cross_attention_layers need vision_config image_size and patch_size") from None


def _state_for(word: str, cfg: dict[str, Any], head_dim: int, where: str) -> RecurrentState | None:
    if word.endswith("mamba2"):
        return mamba2_state(cfg, where)
    if word == "mamba1":
        return mamba1_state(cfg, where)
    if word == "short_conv":
        return short_conv_state(cfg, where)
    if word == "linear":
        return linear_attention_state(cfg, head_dim, where)
    if word == "gdn":
        if cfg.get("linear_num_value_heads") is None:
            raise ConfigError(f"{where}: linear_attention layers without linear_num_value_heads "
                              "(only Gated-DeltaNet linear attention is modelled)")
        return gated_delta_net_state(cfg, where)
    return None


def build_layers(cfg: dict[str, Any], outer: dict[str, Any], n_layers: int, kv_heads: int, head_dim: int,
                 max_pos: int, where: str) -> tuple[Layer, ...]:
    """Every decoder layer's caches, in order (MLA handled by the caller)."""
    words = layer_words(cfg, n_layers, max_pos, where)
    states = {w: _state_for(w, cfg, head_dim, where) for w in set(words)}  # one shape per family
    window, chunk = _window(cfg), cfg.get("attention_chunk_size")
    gemma4 = str(cfg.get("model_type", "")) in GEMMA4_TYPES  # full layers: global head dim and KV heads
    layers: list[Layer] = []
    for word in words:
        kind = word.split("+")[0]
        if (kind == "sliding" and not window) or (kind == "chunked" and not chunk):
            kind = "full"  # a layer type without its window attends to everything
        state = states[word]
        if kind in ("mamba1", "mamba2", "gdn", "short_conv", "linear", "mlp"):
            layers.append(Layer.mixer(state) if state is not None else Layer.mlp_only())
            continue
        heads, dim = (
            layer_geometry(cfg, len(layers), kind == "full", kv_heads, head_dim) if gemma4 else (kv_heads, head_dim)
        )
        if kind == "sliding":
            att: FullAttention | SlidingWindow | ChunkedLocal | CrossAttention = SlidingWindow(
                heads, dim, dim, window_tokens=int(window or 0))
        elif kind == "chunked":
            att = ChunkedLocal(heads, dim, dim, chunk_tokens=int(chunk or 0))
        elif kind == "cross":
            att = CrossAttention(heads, dim, dim, encoder_tokens=_encoder_tokens(outer, where))
        else:
            att = FullAttention(heads, dim, dim)
        layers.append(Layer.of(att, state) if state is not None else Layer.of(att))
    shared = cfg.get("num_kv_shared_layers") or 0
    if isinstance(shared, int) and 0 < shared < n_layers:
        # Gemma-3n: the last `num_kv_shared_layers` layers reuse an earlier layer's K/V (vLLM gemma3n.py)
        layers[n_layers - shared:] = [Layer.kv_shared() for _ in range(shared)]
    return tuple(layers)


def indexer_layers(cfg: dict[str, Any], n_layers: int, where: str) -> list[bool]:
    """Which layers keep a sparse-attention indexer of their own (its weights and K cache). All of
    them unless `indexer_types` says otherwise (GLM-5.2/5.3: "full" layers own one, "shared" ones
    reuse an earlier layer's top-k, so they hold neither weights nor cache)."""
    types = cfg.get("indexer_types")
    if types is None:
        return [True] * n_layers
    if not isinstance(types, list) or len(types) != n_layers or any(t not in ("full", "shared") for t in types):
        raise ConfigError(f"{where}: indexer_types must list 'full' or 'shared' for each of the {n_layers} layers")
    return [t == "full" for t in types]
