"""The layer-layout rules: what each decoder layer caches (a `Layer` of cache kinds,
kvplan.spec.layer and kvplan.spec.cache), read from the layout keys of a config.json, as vLLM builds
each layer's `KVCacheSpec`. A layer may hold a fixed per-request state (MambaSpec) on its own or
beside its attention (Falcon-H1, whose layers run attention and Mamba2 in parallel; Zamba2's hybrid
layers); Gemma-3n's `num_kv_shared_layers` read another layer's cache and hold none.

The generic layout keys, in order: the family's own layout (`Family.layer_words` or `Family.layers`),
else `kv_lora_rank` (MLA on every layer, with DeepSeek-V3.2's indexer K where `indexer_types` says),
`hybrid_override_pattern` (M Mamba2, * attention, - MLP, E MoE; or transformers 5's `layers_block_type`
words), `layer_types` (full, sliding, chunked, linear / mamba, conv), `linear_num_value_heads` (Gated-
DeltaNet every `full_attention_interval`-th layer), `cross_attention_layers`, and otherwise
`sliding_window` on the layers the family says (`Family.windows`; default every layer).
`num_kv_shared_layers` makes the last layers KV-shared.
"""
from __future__ import annotations

from typing import Any

from kvplan.errors import ConfigError
from kvplan.spec.cache import (
    ChunkedLocal,
    CrossAttention,
    FullAttention,
    IndexedSparse,
    MlaLatent,
    RecurrentState,
    SlidingWindow,
)
from kvplan.spec.families import Family, Geometry
from kvplan.spec.geometry import require_int
from kvplan.spec.layer import Layer
from kvplan.spec.state import (
    gated_delta_net_state,
    linear_attention_state,
    mamba1_state,
    mamba2_state,
    short_conv_state,
)

_LAYER_TYPE_WORDS = {
    "full_attention": "full", "attention": "full", "global": "full", "global_attention": "full",
    "sliding_attention": "sliding", "local_attention": "sliding", "sliding": "sliding",
    "chunked_attention": "chunked", "linear_attention": "linear", "mamba": "linear",
    "conv": "short_conv",  # LFM2: a gated short convolution (vLLM lfm2.py: anything not full_attention)
}


def window_of(cfg: dict[str, Any]) -> int | None:
    window = cfg.get("sliding_window")
    return int(window) if isinstance(window, (int, float)) and not isinstance(window, bool) and window > 0 else None


def layer_windows(cfg: dict[str, Any], n_layers: int, max_pos: int, family: Family) -> list[int | None]:
    """Per layer: the sliding window in tokens, or None for full attention (no `layer_types`); the
    family says which layers a `sliding_window` applies to (default: every layer, as Mistral v0.1,
    Phi-3, Starcoder2)."""
    window = window_of(cfg)
    if window is None or (max_pos and window >= max_pos):
        return [None] * n_layers  # a window as long as the context is full attention (Phi-4)
    if family.windows is not None:
        return family.windows(cfg, n_layers, window)
    return [window] * n_layers


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


_BLOCK_WORDS = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-", "moe": "E"}


def blocks_as_pattern(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """transformers 5's `layers_block_type` words (Nemotron-H) as the `hybrid_override_pattern` vLLM reads."""
    blocks = cfg.get("layers_block_type")
    if cfg.get("hybrid_override_pattern") or not isinstance(blocks, list):
        return cfg
    unknown = sorted({str(b) for b in blocks} - set(_BLOCK_WORDS))
    if unknown:
        raise ConfigError(
            f"{where}: unsupported layers_block_type {unknown[0]!r}; known: {', '.join(sorted(_BLOCK_WORDS))}"
        )
    return {**cfg, "hybrid_override_pattern": "".join(_BLOCK_WORDS[str(b)] for b in blocks)}


def _from_pattern(cfg: dict[str, Any], n_layers: int, where: str) -> list[str]:
    """Nemotron-H `hybrid_override_pattern`: one character per layer."""
    pattern = str(cfg["hybrid_override_pattern"])
    mapping = {"M": "mamba2", "*": "full", "-": "mlp", "E": "mlp"}
    if len(pattern) != n_layers or set(pattern) - set(mapping):
        raise ConfigError(f"{where}: hybrid_override_pattern {pattern!r} must have {n_layers} characters "
                          "out of M (mamba), * (attention), - (MLP), E (MoE)")
    return [mapping[c] for c in pattern]


def layer_words(cfg: dict[str, Any], n_layers: int, max_pos: int, where: str, family: Family) -> list[str]:
    """One word per layer: full, sliding, chunked, cross, mla, mlp, mamba1, mamba2, gdn, kda, short_conv,
    linear or full+mamba2: the family's own layout, else the generic layout keys."""
    if family.layer_words is not None:
        words = family.layer_words(cfg, n_layers, where)
        if words is not None:
            return words
    if cfg.get("kv_lora_rank"):
        return ["mla"] * n_layers
    if cfg.get("hybrid_override_pattern"):
        return _from_pattern(cfg, n_layers, where)
    if isinstance(cfg.get("layer_types"), list) and cfg["layer_types"]:
        return _from_layer_types(cfg, n_layers, where)
    if cfg.get("linear_num_value_heads") is not None:
        # Qwen3-Next / Qwen3.5 without layer_types: transformers' default, every
        # `full_attention_interval`-th layer full, Gated-DeltaNet linear attention elsewhere
        interval = int(cfg.get("full_attention_interval") or 4)
        return ["full" if (i + 1) % interval == 0 else "gdn" for i in range(n_layers)]
    cross = cfg.get("cross_attention_layers")
    if isinstance(cross, list) and cross:
        return ["cross" if i in set(cross) else "full" for i in range(n_layers)]
    return ["sliding" if w else "full" for w in layer_windows(cfg, n_layers, max_pos, family)]


def _encoder_tokens(outer: dict[str, Any], where: str) -> int:
    """Encoder tokens one request's cross-attention layers cache (Mllama: tiles x (patches + CLS))."""
    vision = outer.get("vision_config") or {}
    try:
        patches = (int(vision["image_size"]) // int(vision["patch_size"])) ** 2 + 1
        return int(vision.get("max_num_tiles") or 4) * patches
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        raise ConfigError(f"{where}: cross_attention_layers need vision_config image_size and patch_size") from None


def _state_for(word: str, cfg: dict[str, Any], head_dim: int, where: str, family: Family) -> RecurrentState | None:
    if family.state is not None:
        state = family.state(word, cfg, head_dim, where)
        if state is not None:
            return state
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
    if word not in ("full", "sliding", "chunked", "cross", "mla", "mlp"):
        raise ConfigError(f"{where}: no state rule for {word!r} layers")
    return None


def _mla_latent(cfg: dict[str, Any], where: str) -> int:
    require_int(cfg, "qk_nope_head_dim", where)  # MLA: the parameter count needs all three
    require_int(cfg, "v_head_dim", where)
    return int(cfg["kv_lora_rank"]) + require_int(cfg, "qk_rope_head_dim", where)


def mla_layers(cfg: dict[str, Any], n_layers: int, where: str) -> tuple[Layer, ...]:
    """`n_layers` MLA layers, each with the sparse indexer's K where it keeps its own (DeepSeek-V3.2)."""
    latent, indexer = _mla_latent(cfg, where), _indexer_bytes(cfg, where)
    plain = Layer.of(MlaLatent(latent))
    indexed = Layer.of(IndexedSparse(MlaLatent(latent), index_bytes=indexer)) if indexer else plain
    return tuple(indexed if own else plain for own in indexer_layers(cfg, n_layers, where))


def _indexer_bytes(cfg: dict[str, Any], where: str) -> int:
    """DeepSeek-V3.2 (`index_topk` set): the indexer's K cache per token and layer, as vLLM's
    deepseek_v2.py Indexer sizes DeepseekV32IndexerCache: index_head_dim fp8 bytes + 4 (fp32 scale)
    per 128 values; 0 for dense MLA."""
    if cfg.get("index_topk") is None:
        return 0
    dim = int(cfg.get("index_head_dim") or 128)
    if dim <= 0 or dim % 128:
        raise ConfigError(f"{where}: index_head_dim must be a positive multiple of 128, got {dim}")
    return dim + dim // 128 * 4


def build_layers(cfg: dict[str, Any], outer: dict[str, Any], n_layers: int, geometry: Geometry, max_pos: int,
                 where: str, family: Family) -> tuple[Layer, ...]:
    """Every decoder layer's caches, in order."""
    words = layer_words(cfg, n_layers, max_pos, where, family)
    states = {w: _state_for(w, cfg, geometry.head_dim, where, family) for w in set(words)}  # one shape per family
    mla = mla_layers(cfg, n_layers, where) if "mla" in words else ()
    window, chunk = window_of(cfg), cfg.get("attention_chunk_size")
    layers: list[Layer] = []
    for i, word in enumerate(words):
        kind = word.split("+")[0]
        if (kind == "sliding" and not window) or (kind == "chunked" and not chunk):
            kind = "full"  # a layer type without its window attends to everything
        state = states[word]
        if kind == "mla":
            layers.append(mla[i])
            continue
        if state is not None and kind not in ("full", "sliding", "chunked", "cross"):
            layers.append(Layer.mixer(state))
            continue
        if kind == "mlp":
            layers.append(Layer.mlp_only())
            continue
        att = _attention_cache(kind, cfg, outer, i, geometry, window, chunk, family, where)
        layers.append(Layer.of(att, state) if state is not None else Layer.of(att))
    shared = cfg.get("num_kv_shared_layers") or 0
    if isinstance(shared, int) and 0 < shared < n_layers:
        # Gemma-3n: the last `num_kv_shared_layers` layers reuse an earlier layer's K/V (vLLM gemma3n.py)
        layers[n_layers - shared:] = [Layer.kv_shared() for _ in range(shared)]
    return tuple(layers)


def _attention_cache(kind: str, cfg: dict[str, Any], outer: dict[str, Any], i: int, geometry: Geometry,
                     window: int | None, chunk: Any, family: Family,
                     where: str) -> FullAttention | SlidingWindow | ChunkedLocal | CrossAttention:
    heads, dim = geometry.kv_heads, geometry.head_dim
    if family.layer_geometry is not None:  # Gemma 4: full layers have their own head size and KV heads
        heads, dim = family.layer_geometry(cfg, i, kind == "full", heads, dim)
    if kind == "sliding":
        return SlidingWindow(heads, dim, dim, window_tokens=int(window or 0))
    if kind == "chunked":
        return ChunkedLocal(heads, dim, dim, chunk_tokens=int(chunk or 0))
    if kind == "cross":
        return CrossAttention(heads, dim, dim, encoder_tokens=_encoder_tokens(outer, where))
    return FullAttention(heads, dim, dim)


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
