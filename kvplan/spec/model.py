"""`ModelSpec`: what the planner needs to know about a model, read from a bundled profile,
a Hugging Face `config.json`, or a local model directory.

The rules that calculators get wrong live here: an explicit `head_dim` wins over
hidden/heads; a missing `num_key_value_heads` means MHA; Falcon's `multi_query`; GPT-2 key
names; `text_config` nesting; per-layer cache kinds (`kvplan.spec.layers`: full, sliding window,
chunked, MLA, cross-attention, KV-shared, and Mamba / Gated-DeltaNet state layers).
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from kvplan.errors import ConfigError
from kvplan.spec.cache import IndexedSparse, MlaLatent
from kvplan.spec.checked_types import unchecked_type_warning
from kvplan.spec.checkpoint_quant import weight_quant_from_config
from kvplan.spec.config_keys import unread_keys_warning
from kvplan.spec.config_schema import check_config
from kvplan.spec.dtypes import (
    KV_DTYPES,
    MODEL_DTYPE_BYTES,
    SPARSE_MLA_FP8_BY_DEFAULT,
    KvDtype,
    normalize_model_dtype,
    resolve_kv_dtype,
)
from kvplan.spec.encoder_params import encoder_params
from kvplan.spec.families import family_of
from kvplan.spec.layer import Layer
from kvplan.spec.layers import ATTENTION_FREE_TYPES, build_layers, indexer_layers, kda_layer_indexes
from kvplan.spec.longcat_params import ATTENTIONS_PER_LAYER, LONGCAT_TYPES
from kvplan.spec.params import ParamCount, count_params, moe_shape
from kvplan.spec.quant import WeightQuant
from kvplan.spec.state import kda_state
from kvplan.validation import number_problem, short_repr

__all__ = ["Layer", "ModelSpec", "spec_from_config", "spec_from_path", "text_config"]

# Key aliases used by older architectures (GPT-2, Falcon, OPT, ...).
_KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"),
}

# Class defaults for keys that published configs omit (from transformers' config classes).
_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262208, "max_position_embeddings": 131072, "sliding_window_pattern": 6,
                    "tie_word_embeddings": True, "head_dim": 256, "sliding_window": 4096},
    "gemma2": {"tie_word_embeddings": True, "head_dim": 256, "max_position_embeddings": 8192},
    "gemma": {"tie_word_embeddings": True, "max_position_embeddings": 8192},
    "falcon": {"max_position_embeddings": 2048, "multi_query": True, "new_decoder_architecture": False},
    "gpt2": {"max_position_embeddings": 1024, "tie_word_embeddings": True},
    "opt": {"tie_word_embeddings": True},
    "llama": {"max_position_embeddings": 2048, "vocab_size": 32000},
    "mistral": {"vocab_size": 32000, "max_position_embeddings": 32768},
    "mixtral": {"vocab_size": 32000, "max_position_embeddings": 32768},
    "granite": {"vocab_size": 32000},
    **dict.fromkeys(("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"), {"max_position_embeddings": 32768}),
    "phi3": {"max_position_embeddings": 4096},
}
DEFAULT_MAX_MODEL_LEN = 2048  # vLLM's length when a config names none (and its class has no default)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    model_type: str
    architecture: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int  # as the config declares after the rules above (MLA: attention heads)
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int  # DEFAULT_MAX_MODEL_LEN when the config names none (max_len_known False)
    dtype: str  # checkpoint dtype as served ("auto" resolves to this)
    layers: tuple[Layer, ...]
    params: ParamCount
    quant: WeightQuant
    checkpoint_weights_bytes: int | None = None  # real bytes on disk when known
    hf_id: str | None = None
    source: str = ""
    aliases: tuple[str, ...] = ()
    config_dtype: str | None = None  # dtype as written in config.json, before vLLM's float32 downcast
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    warnings: tuple[str, ...] = ()  # what the spec could not model (unread config keys, quantization assumed)
    max_len_known: bool = True  # the config (or its class) gives a maximum length: longer --max-model-len is refused

    @property
    def serve_arg(self) -> str:
        """What `vllm serve` takes for this model: its Hub id, else the directory its config.json is
        in (absolute, shell-quoted), else, for a config file under another name, a placeholder naming
        it: vLLM serves a repo id or a model directory, not a loose config file."""
        if self.hf_id:
            return self.hf_id
        if not self.source.endswith(".json"):  # a bundled profile's source is prose (a synthetic test model)
            return self.name
        path = Path(self.source)
        if path.name == "config.json":
            return shlex.quote(str(path.resolve().parent))
        return f"<model directory of {path.name}>"

    @cached_property
    def moe_shape(self) -> tuple[int, int, int, int]:
        """(routed experts, experts per token, expert width, shared experts) of the decoder (a
        multimodal config keeps them in `text_config`); zeros for a dense model."""
        return moe_shape(text_config(self.config)) if self.config else (0, 0, 0, 0)

    @cached_property
    def tp_norm_allreduces(self) -> int:
        """All-reduces over the TP group a forward pass adds beyond the two per layer: a norm whose
        statistics span heads split across GPUs (the family module says which; e.g. minimax_m2.py)."""
        cfg = text_config(self.config) if self.config else {}
        family = family_of(cfg) if cfg else None
        if family is None or family.tp_norm_allreduces is None:
            return 0
        return family.tp_norm_allreduces(cfg, self.num_layers)

    @property
    def is_mla(self) -> bool:
        return any(layer.kind == "mla" for layer in self.layers)  # the attention cache is a latent

    @property
    def attention_kinds(self) -> dict[str, int]:
        """Layers per kind as reports count them (`Layer.label`: mamba2, gdn, full+mamba2, ...)."""
        counts: dict[str, int] = {}
        for layer in self.layers:
            counts[layer.label] = counts.get(layer.label, 0) + 1
        return counts

    def kv_dtype(self, kv_cache_dtype: str, model_dtype: str | None = None) -> KvDtype:
        """What `--kv-cache-dtype` caches for this model, served in `model_dtype` (default: its own):
        the one place `auto`, the checkpoint's KV quantization and sparse MLA are decided."""
        if any(c.fixed_layout for layer in self.layers for c in layer.caches):  # DeepSeek-V4: its fp8 layout
            key = str(kv_cache_dtype).lower()
            if key != "auto" and not key.startswith("fp8"):
                raise ConfigError(f"{self.name} caches DeepSeek-V4's fixed fp8 layout only (vLLM serves it so): "
                                  f"--kv-cache-dtype {kv_cache_dtype!r} is not possible; choices: auto, fp8")
            return KV_DTYPES["fp8_ds_mla"]
        return resolve_kv_dtype(kv_cache_dtype, model_dtype or self.dtype, sparse_mla=self.has_sparse_indexer,
                                checkpoint=self.quant.kv_cache_dtype,
                                auto_fp8_ds_mla=self.architecture in SPARSE_MLA_FP8_BY_DEFAULT)

    @property
    def has_sparse_indexer(self) -> bool:
        """DeepSeek-V3.2 sparse MLA: vLLM serves it with the fp8_ds_mla cache and 64-token blocks."""
        return any(c.sparse_mla for layer in self.layers for c in layer.caches)

    @property
    def has_state(self) -> bool:
        """Whether any layer holds a fixed per-request state (Mamba, Gated-DeltaNet)."""
        return any(layer.state is not None for layer in self.layers)

    @property
    def has_attention_cache(self) -> bool:
        return any(c.attention for layer in self.layers for c in layer.paged)

    @property
    def dtype_bytes(self) -> int:
        return MODEL_DTYPE_BYTES[self.dtype]

    @property
    def weights_bytes(self) -> int:
        """Bytes of the weights as served: checkpoint bytes when known, else computed."""
        if self.checkpoint_weights_bytes:
            return self.checkpoint_weights_bytes
        return self.quant.weights_bytes(self.params, self.dtype_bytes)

    def without_encoder(self) -> ModelSpec:
        """The model as vLLM loads it text-only (--limit-mm-per-prompt image=0,video=0): no vision tower."""

        if not self.params.encoder:
            return self
        saved = self.params.encoder * self.dtype_bytes  # the tower stays 16-bit in quantized checkpoints too
        weights = self.checkpoint_weights_bytes - saved if self.checkpoint_weights_bytes else None
        return replace(self, params=replace(self.params, encoder=0), checkpoint_weights_bytes=weights)

    def with_kv_heads(self, num_kv_heads: int) -> ModelSpec:
        """A what-if copy with `num_kv_heads` cached heads per full/sliding layer (GQA variant)."""

        layers = tuple(layer.with_kv_heads(num_kv_heads) for layer in self.layers)
        return replace(self, num_kv_heads=num_kv_heads, layers=layers)


def _get(cfg: dict[str, Any], key: str, default: Any = None) -> Any:
    for alias in _KEY_ALIASES.get(key, (key,)):
        if cfg.get(alias) is not None:
            return cfg[alias]
    return default


def _require_int(cfg: dict[str, Any], key: str, where: str) -> int:
    value = _get(cfg, key)
    if value is None:
        raise ConfigError(f"{where}: missing required field {key!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value <= 0:
        raise ConfigError(f"{where}: field {key!r} must be a positive integer, got {value!r}")
    return int(value)


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder's config: `text_config` (Gemma 3, multimodal) merged over outer keys it lacks."""
    if not isinstance(config, dict):
        raise ConfigError(f"config must be a JSON object, got {type(config).__name__}")
    inner = config.get("text_config") or config.get("llm_config") or config.get("language_config")
    if isinstance(inner, dict):
        merged = {
            k: v for k, v in config.items() if k not in ("text_config", "vision_config", "architectures", "model_type")
        }
        merged.update({k: v for k, v in inner.items() if v is not None or k not in merged})
        merged.setdefault("architectures", config.get("architectures"))
        merged.setdefault("model_type", inner.get("model_type") or config.get("model_type"))
        return merged
    return dict(config)


def _thinker(config: dict[str, Any]) -> dict[str, Any]:
    """Qwen2.5-Omni / Qwen3-Omni: vLLM serves the thinker (its text decoder, vision and audio towers);
    the talker and code2wav models are not loaded."""
    thinker = config.get("thinker_config")
    if not isinstance(thinker, dict):
        return config
    dropped = ("thinker_config", "talker_config", "code2wav_config", "token2wav_config")
    return {**{k: v for k, v in config.items() if k not in dropped}, **thinker}


def _dbrx_keys(cfg: dict[str, Any]) -> dict[str, Any]:
    """DBRX nests attention and MoE keys (vLLM dbrx.py reads attn_config.kv_n_heads and
    ffn_config.ffn_hidden_size / moe_num_experts / moe_top_k): lift them to the usual names."""
    attn = cfg.get("attn_config") if isinstance(cfg.get("attn_config"), dict) else {}
    ffn = cfg.get("ffn_config") if isinstance(cfg.get("ffn_config"), dict) else {}
    lifted = {"num_key_value_heads": attn.get("kv_n_heads"), "moe_intermediate_size": ffn.get("ffn_hidden_size"),
              "num_local_experts": ffn.get("moe_num_experts"), "num_experts_per_tok": ffn.get("moe_top_k")}
    return {**cfg, **{k: v for k, v in lifted.items() if v is not None and cfg.get(k) is None}}


def _with_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    if cfg.get("model_type") == "dbrx":
        cfg = _dbrx_keys(cfg)
    defaults = _CLASS_DEFAULTS.get(str(cfg.get("model_type", "")), {})
    return {**defaults, **{k: v for k, v in cfg.items() if v is not None or k not in defaults}}


def _kv_heads(cfg: dict[str, Any], n_heads: int, where: str) -> int:
    model_type = cfg.get("model_type")
    if model_type == "falcon" and not cfg.get("new_decoder_architecture") and cfg.get("multi_query", True):
        return 1  # Falcon-7B: multi-query, whatever n_head_kv says
    for key in ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"):
        if cfg.get(key) is not None:
            value = int(cfg[key])
            if value <= 0 or n_heads % value:
                raise ConfigError(f"{where}: {key}={value} must be positive and divide num_attention_heads={n_heads}")
            return value
    if cfg.get("multi_query") is True:
        return 1
    return n_heads  # no KV-head key: multi-head attention (Llama-2-7b/13b, GPT-2, OPT)


def _serving_dtype(cfg: dict[str, Any], where: str) -> tuple[str, str | None]:
    raw = cfg.get("torch_dtype") or cfg.get("dtype")
    if raw is None:
        return "bfloat16", None
    dtype = normalize_model_dtype(str(raw))
    # vLLM's dtype="auto" serves float32 checkpoints in 16-bit (bfloat16 where supported).
    return ("bfloat16" if dtype == "float32" else dtype), dtype


@dataclass(frozen=True)
class _Attention:
    """The attention geometry shared by a model's attention layers (zeros for attention-free models)."""

    n_heads: int
    kv_heads: int
    head_dim: int


def _attention_geometry(cfg: dict[str, Any], hidden: int, where: str) -> _Attention:
    if str(cfg.get("model_type", "")) in ATTENTION_FREE_TYPES:
        return _Attention(0, 0, 0)  # Mamba / Mamba2: no attention layer at all
    n_heads = _require_int(cfg, "num_attention_heads", where)
    if cfg.get("model_type") == "zamba2":
        # transformers' Zamba2Config overwrites attention_head_dim with 2 x hidden / heads (the shared block
        # attends over [hidden, original embedding]); vLLM zamba2.py passes no num_kv_heads: multi-head
        if (2 * hidden) % n_heads:
            raise ConfigError(f"{where}: 2 x hidden_size={hidden} is not divisible by num_attention_heads={n_heads}")
        return _Attention(n_heads, n_heads, 2 * hidden // n_heads)
    explicit = cfg.get("head_dim") or cfg.get("attention_head_dim")  # Nemotron-H: attention_head_dim
    if explicit is not None:
        head_dim = int(explicit)
    elif hidden % n_heads and cfg.get("kv_lora_rank") and cfg.get("qk_nope_head_dim") and cfg.get("qk_rope_head_dim"):
        # MLA caches a latent; a head is qk_nope + qk_rope wide whatever hidden / heads is (Kimi-K3: 7168 / 96)
        head_dim = int(cfg["qk_nope_head_dim"]) + int(cfg["qk_rope_head_dim"])
    elif hidden % n_heads:
        raise ConfigError(
            f"{where}: hidden_size={hidden} is not divisible by num_attention_heads={n_heads} and no head_dim is given"
        )
    else:
        head_dim = hidden // n_heads
    return _Attention(n_heads, _kv_heads(cfg, n_heads, where), head_dim)


def _intermediate(cfg: dict[str, Any], hidden: int, where: str) -> int:
    """The dense MLP width; a per-layer list (Gemma-3n) gives its largest entry (the params count all)."""
    inter = cfg.get("intermediate_size") or cfg.get("ffn_dim") or cfg.get("n_inner") or cfg.get("ffn_hidden_size")
    if isinstance(inter, list):
        if not inter or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in inter):
            raise ConfigError(f"{where}: intermediate_size must be a positive integer or a list of them, got {inter!r}")
        return max(inter)
    if inter is not None and (isinstance(inter, bool) or not isinstance(inter, (int, float)) or inter <= 0):
        raise ConfigError(f"{where}: intermediate_size must be a positive integer, got {inter!r}")
    return int(inter) if inter else 4 * hidden


_NEMOTRON_BLOCKS = {
    "mamba": "M",
    "linear_attention": "M",
    "attention": "*",
    "full_attention": "*",
    "mlp": "-",
    "moe": "E",
}


def _nemotron_pattern(blocks: list[Any], where: str) -> str:
    """Nemotron-H as transformers 5 writes it: `layers_block_type` words instead of hybrid_override_pattern."""
    unknown = sorted({str(b) for b in blocks} - set(_NEMOTRON_BLOCKS))
    if unknown:
        raise ConfigError(
            f"{where}: unsupported layers_block_type {unknown[0]!r}; known: {', '.join(sorted(_NEMOTRON_BLOCKS))}"
        )
    return "".join(_NEMOTRON_BLOCKS[str(b)] for b in blocks)


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


def _layers(cfg: dict[str, Any], outer: dict[str, Any], n_layers: int, att: _Attention, max_pos: int,
            where: str) -> tuple[Layer, ...]:
    if cfg.get("kv_lora_rank"):
        _require_int(cfg, "qk_nope_head_dim", where)  # MLA: the parameter count needs all three
        _require_int(cfg, "v_head_dim", where)
        latent = int(cfg["kv_lora_rank"]) + _require_int(cfg, "qk_rope_head_dim", where)
        indexer = _indexer_bytes(cfg, where)
        mla_shared = Layer.of(MlaLatent(latent))
        mla = Layer.of(IndexedSparse(MlaLatent(latent), index_bytes=indexer)) if indexer else mla_shared
        kda = kda_layer_indexes(cfg, n_layers, where)  # Kimi-Linear: KDA state layers between the MLA ones
        kda_layer = Layer.mixer(kda_state(cfg, where)) if kda else None
        if cfg.get("model_type") in LONGCAT_TYPES:  # two MLA attentions, two caches, per decoder layer
            n_layers *= ATTENTIONS_PER_LAYER
        own = indexer_layers(cfg, n_layers, where)
        return tuple(kda_layer if i in kda else (mla if own[i] else mla_shared) for i in range(n_layers))
    family = family_of(cfg)
    if family is not None and family.layers is not None:
        return family.layers(cfg, n_layers, att.n_heads, att.head_dim, where)
    return build_layers(cfg, outer, n_layers, att.kv_heads, att.head_dim, max_pos, where)


def spec_from_config(
    config: dict[str, Any],
    name: str,
    *,
    where: str = "config.json",
    hf_id: str | None = None,
    source: str = "",
    aliases: tuple[str, ...] = (),
    checkpoint_weights_bytes: int | None = None,
) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config dict, applying the rules in the module doc."""
    check_config(config, where)  # every key read below has its type and range (config_schema)
    outer = _thinker(config)
    if outer is not config:
        check_config(outer, where)
    cfg = _with_defaults(text_config(outer))
    if not cfg.get("hybrid_override_pattern") and isinstance(cfg.get("layers_block_type"), list) \
            and cfg.get("model_type") != "zamba2":
        cfg["hybrid_override_pattern"] = _nemotron_pattern(cfg["layers_block_type"], where)
    if _get(cfg, "num_hidden_layers") is None and isinstance(cfg.get("hybrid_override_pattern"), str):
        cfg["num_hidden_layers"] = len(cfg["hybrid_override_pattern"])  # Nemotron-H: one character per layer
    n_layers = _require_int(cfg, "num_hidden_layers", where)
    hidden = _require_int(cfg, "hidden_size", where)
    att = _attention_geometry(cfg, hidden, where)
    vocab = _get(cfg, "vocab_size")
    if vocab is None:
        raise ConfigError(f"{where}: missing required field 'vocab_size'")
    max_pos = int(_get(cfg, "max_position_embeddings", 0) or 0) or DEFAULT_MAX_MODEL_LEN
    max_len_known = bool(_get(cfg, "max_position_embeddings", 0))
    inter = _intermediate(cfg, hidden, where)
    layers = _layers(cfg, outer, n_layers, att, max_pos, where)
    dtype, config_dtype = _serving_dtype(cfg, where)
    params = count_params(cfg, layers=layers, hidden=hidden, n_heads=att.n_heads, kv_heads=att.kv_heads,
                          head_dim=att.head_dim, intermediate=inter, vocab=int(vocab),
                          encoder=encoder_params(outer, hidden))
    archs = outer.get("architectures") or cfg.get("architectures") or [cfg.get("model_type", "unknown")]
    quant = weight_quant_from_config(outer, {"attention": sum(1 for layer in layers if layer.attends),
                                             "mixer": sum(1 for layer in layers if layer.state is not None)})
    family = family_of(cfg)
    if family is not None and family.fp8_groups is not None and quant.method == "fp8" and not quant.groups:
        quant = replace(quant, groups=family.fp8_groups(cfg)) if family.fp8_groups(cfg) else quant
    unread = unread_keys_warning(outer, cfg)
    notes = ((unread,) if unread else ()) + quant.notes + ((family.note,) if family is not None and family.note else ())
    unchecked = None if family is not None else unchecked_type_warning(str(cfg.get("model_type", "")))
    notes += (unchecked,) if unchecked else ()
    return ModelSpec(
        name=name,
        model_type=str(cfg.get("model_type", "unknown")),
        architecture=str(archs[0]),
        num_layers=len(layers),
        hidden_size=hidden,
        num_attention_heads=att.n_heads,
        num_kv_heads=att.kv_heads,
        head_dim=att.head_dim,
        intermediate_size=inter,
        vocab_size=int(vocab),
        max_position_embeddings=max_pos,
        dtype=dtype,
        layers=layers,
        params=params,
        quant=quant,
        checkpoint_weights_bytes=checkpoint_weights_bytes,
        hf_id=hf_id,
        source=source,
        aliases=aliases,
        config_dtype=config_dtype,
        config=outer,
        warnings=tuple(f"{name}: {w}" for w in notes + _max_len_note(max_len_known)),
        max_len_known=max_len_known,
    )


def _max_len_note(max_len_known: bool) -> tuple[str, ...]:
    if max_len_known:
        return ()
    return (
        "the config names no maximum length (max_position_embeddings and its aliases); planned with vLLM's default "
        f"{DEFAULT_MAX_MODEL_LEN:,}, and a longer --max-model-len is accepted as vLLM accepts it",
    )


def load_config_json(path: Path) -> dict[str, Any]:
    from kvplan.errors import read_user_file

    text = read_user_file(path, "config.json", max_bytes=16 * 2**20)  # regular files only, bounded
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: bad JSON, or an integer over 4,300 digits
        raise ConfigError(
            f"{path}: not valid JSON ({number_problem(exc) if isinstance(exc, ValueError) else 'nested too deeply'})"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data


def with_hf_quant_config(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """A ModelOpt checkpoint's `hf_quant_config.json` beside config.json, as vLLM reads it: the
    scheme of a config without its own `quantization_config`."""
    if config.get("quantization_config") or not path.is_file():
        return config
    data = load_config_json(path)
    scheme = data.get("quantization")
    if not isinstance(scheme, dict):
        raise ConfigError(f"{path}: expected a 'quantization' object (ModelOpt's hf_quant_config.json)")
    return {**config, "quantization_config": {"quant_method": "modelopt", **scheme}}


def spec_from_path(path: str | Path) -> ModelSpec:
    """A config.json file, or a local model directory (config.json + safetensors for real weight bytes)."""
    from kvplan.spec.checkpoint import checkpoint_bytes

    p = Path(path).expanduser()
    try:
        cfg_path = p / "config.json" if p.is_dir() else p
        found = cfg_path.exists()
    except (OSError, ValueError):  # a name too long for the filesystem, a NUL byte
        found = False
    if not found:
        raise ConfigError(f"{short_repr(str(p))}: no config.json found")
    config = with_hf_quant_config(load_config_json(cfg_path), cfg_path.parent / "hf_quant_config.json")
    weights = checkpoint_bytes(p) if p.is_dir() else None
    name = p.name if p.is_dir() else (p.parent.name or p.stem) if p.name == "config.json" else p.stem
    return spec_from_config(config, name, where=str(cfg_path), source=str(cfg_path), checkpoint_weights_bytes=weights)
