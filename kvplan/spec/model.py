"""`ModelSpec`: what the planner needs to know about a model, read from a bundled profile,
a Hugging Face `config.json`, or a local model directory.

The rules that calculators get wrong live here: an explicit `head_dim` wins over
hidden/heads; a missing `num_key_value_heads` means MHA; Falcon's `multi_query`; GPT-2 key
names; `text_config` nesting; per-layer attention kinds (full, sliding window, MLA).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kvplan.errors import ConfigError
from kvplan.spec.config_numbers import check_config_numbers
from kvplan.spec.dtypes import MODEL_DTYPE_BYTES, normalize_model_dtype
from kvplan.spec.params import ParamCount, count_params
from kvplan.spec.quant import WeightQuant, weight_quant_from_config

AttentionKind = Literal["full", "sliding", "mla", "none"]

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
    "gemma2": {"tie_word_embeddings": True, "head_dim": 256},
    "gemma": {"tie_word_embeddings": True},
    "falcon": {"max_position_embeddings": 2048, "multi_query": True, "new_decoder_architecture": False},
    "gpt2": {"max_position_embeddings": 1024, "tie_word_embeddings": True},
    "opt": {"tie_word_embeddings": True},
    "llama": {"max_position_embeddings": 2048, "vocab_size": 32000},
    "mistral": {"vocab_size": 32000, "max_position_embeddings": 32768},
    "mixtral": {"vocab_size": 32000, "max_position_embeddings": 32768},
    "granite": {"vocab_size": 32000},
}

# Families whose configs carry a `sliding_window` that applies to every layer when set.
_QWEN_TYPES = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl", "qwen2_5_vl"}


@dataclass(frozen=True)
class LayerAttention:
    """What one decoder layer caches per token (before tensor parallelism)."""

    kind: AttentionKind
    num_kv_heads: int  # heads whose K and V are cached; MLA: 1 (one latent vector)
    head_dim_k: int  # elements per K vector; MLA: kv_lora_rank + qk_rope_head_dim
    head_dim_v: int  # elements per V vector; MLA: 0 (V is not cached separately)
    window_tokens: int | None = None  # sliding layers only


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
    max_position_embeddings: int
    dtype: str  # checkpoint dtype as served ("auto" resolves to this)
    layers: tuple[LayerAttention, ...]
    params: ParamCount
    quant: WeightQuant
    checkpoint_weights_bytes: int | None = None  # real bytes on disk when known
    hf_id: str | None = None
    source: str = ""
    aliases: tuple[str, ...] = ()
    config_dtype: str | None = None  # dtype as written in config.json, before vLLM's float32 downcast
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def is_mla(self) -> bool:
        return any(layer.kind == "mla" for layer in self.layers)

    @property
    def attention_kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for layer in self.layers:
            counts[layer.kind] = counts.get(layer.kind, 0) + 1
        return counts

    @property
    def dtype_bytes(self) -> int:
        return MODEL_DTYPE_BYTES[self.dtype]

    @property
    def weights_bytes(self) -> int:
        """Bytes of the weights as served: checkpoint bytes when known, else computed."""
        if self.checkpoint_weights_bytes:
            return self.checkpoint_weights_bytes
        return self.quant.weights_bytes(self.params, self.dtype_bytes)

    def with_kv_heads(self, num_kv_heads: int) -> ModelSpec:
        """A what-if copy with `num_kv_heads` cached heads per full/sliding layer (GQA variant)."""
        from dataclasses import replace

        layers = tuple(
            replace(layer, num_kv_heads=num_kv_heads) if layer.kind in ("full", "sliding") else layer
            for layer in self.layers
        )
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
        merged = {k: v for k, v in config.items() if k not in ("text_config", "vision_config", "architectures", "model_type")}
        merged.update({k: v for k, v in inner.items() if v is not None or k not in merged})
        merged.setdefault("architectures", config.get("architectures"))
        merged.setdefault("model_type", inner.get("model_type") or config.get("model_type"))
        return merged
    return dict(config)


def _with_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
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


def _layer_windows(cfg: dict[str, Any], n_layers: int) -> list[int | None]:
    """Per layer: the sliding window in tokens, or None for full attention."""
    window = cfg.get("sliding_window")
    window = int(window) if isinstance(window, (int, float)) and not isinstance(window, bool) and window > 0 else None
    model_type = str(cfg.get("model_type", ""))
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        if len(layer_types) != n_layers:
            raise ConfigError(f"config: layer_types has {len(layer_types)} entries but num_hidden_layers is {n_layers}")
        return [window if str(t) in ("sliding_attention", "local_attention", "sliding") else None for t in layer_types]
    max_pos = int(_get(cfg, "max_position_embeddings", 0) or 0)
    if window is None or (max_pos and window >= max_pos):
        return [None] * n_layers  # a window as long as the context is full attention (Phi-4)
    if model_type in _QWEN_TYPES:
        if not cfg.get("use_sliding_window", False):
            return [None] * n_layers
        first = int(cfg.get("max_window_layers", 0))
        return [window if i >= first else None for i in range(n_layers)]
    if model_type == "gemma2":
        return [window if i % 2 == 0 else None for i in range(n_layers)]
    if model_type in ("gemma3_text", "gemma3"):
        pattern = int(cfg.get("sliding_window_pattern") or 6)
        return [None if (i + 1) % pattern == 0 else window for i in range(n_layers)]
    if model_type in ("cohere2",):
        pattern = int(cfg.get("sliding_window_pattern") or 4)
        return [None if (i + 1) % pattern == 0 else window for i in range(n_layers)]
    return [window] * n_layers  # Mistral v0.1, Phi-3, Starcoder2: every layer


def _serving_dtype(cfg: dict[str, Any], where: str) -> tuple[str, str | None]:
    raw = cfg.get("torch_dtype") or cfg.get("dtype")
    if raw is None:
        return "bfloat16", None
    dtype = normalize_model_dtype(str(raw))
    # vLLM's dtype="auto" serves float32 checkpoints in 16-bit (bfloat16 where supported).
    return ("bfloat16" if dtype == "float32" else dtype), dtype


def spec_from_config(config: dict[str, Any], name: str, *, where: str = "config.json", hf_id: str | None = None,
                     source: str = "", aliases: tuple[str, ...] = (), checkpoint_weights_bytes: int | None = None) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config dict, applying the rules in the module doc."""
    outer = config
    cfg = _with_defaults(text_config(config))
    check_config_numbers(cfg, where)
    n_layers = _require_int(cfg, "num_hidden_layers", where)
    n_heads = _require_int(cfg, "num_attention_heads", where)
    hidden = _require_int(cfg, "hidden_size", where)
    explicit_head_dim = cfg.get("head_dim")
    if explicit_head_dim is not None:
        head_dim = int(explicit_head_dim)
    else:
        if hidden % n_heads:
            raise ConfigError(f"{where}: hidden_size={hidden} is not divisible by num_attention_heads={n_heads} and no head_dim is given")
        head_dim = hidden // n_heads
    kv_heads = _kv_heads(cfg, n_heads, where)
    vocab = _get(cfg, "vocab_size")
    if vocab is None:
        raise ConfigError(f"{where}: missing required field 'vocab_size'")
    max_pos = int(_get(cfg, "max_position_embeddings", 0) or 0) or 2048
    inter = cfg.get("intermediate_size") or cfg.get("ffn_dim") or cfg.get("n_inner") or cfg.get("ffn_hidden_size")
    inter = int(inter) if inter else 4 * hidden
    if cfg.get("kv_lora_rank"):
        rope = _require_int(cfg, "qk_rope_head_dim", where)
        latent = int(cfg["kv_lora_rank"]) + rope
        layers = tuple(LayerAttention("mla", 1, latent, 0) for _ in range(n_layers))
    else:
        layers = tuple(
            LayerAttention("sliding" if w else "full", kv_heads, head_dim, head_dim, w)
            for w in _layer_windows(cfg, n_layers)
        )
    dtype, config_dtype = _serving_dtype(cfg, where)
    params = count_params(cfg, n_layers=n_layers, hidden=hidden, n_heads=n_heads, kv_heads=kv_heads,
                          head_dim=head_dim, intermediate=inter, vocab=int(vocab))
    archs = outer.get("architectures") or cfg.get("architectures") or [cfg.get("model_type", "unknown")]
    return ModelSpec(
        name=name, model_type=str(cfg.get("model_type", "unknown")), architecture=str(archs[0]),
        num_layers=n_layers, hidden_size=hidden, num_attention_heads=n_heads, num_kv_heads=kv_heads,
        head_dim=head_dim, intermediate_size=inter, vocab_size=int(vocab), max_position_embeddings=max_pos,
        dtype=dtype, layers=layers, params=params, quant=weight_quant_from_config(outer),
        checkpoint_weights_bytes=checkpoint_weights_bytes, hf_id=hf_id, source=source, aliases=aliases,
        config_dtype=config_dtype, config=outer,
    )


def load_config_json(path: Path) -> dict[str, Any]:
    from kvplan.errors import read_user_file

    text = read_user_file(path, "config.json", max_bytes=16 * 2**20)  # regular files only, bounded
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(f"{path}: not valid JSON ({str(exc)[:200] or 'nested too deeply'})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data


def spec_from_path(path: str | Path) -> ModelSpec:
    """A config.json file, or a local model directory (config.json + safetensors for real weight bytes)."""
    from kvplan.spec.checkpoint import checkpoint_bytes

    p = Path(path).expanduser()
    cfg_path = p / "config.json" if p.is_dir() else p
    if not cfg_path.exists():
        raise ConfigError(f"{p}: no config.json found")
    config = load_config_json(cfg_path)
    weights = checkpoint_bytes(p) if p.is_dir() else None
    name = p.name if p.is_dir() else p.parent.name or p.stem
    return spec_from_config(config, name, where=str(cfg_path), source=str(cfg_path), checkpoint_weights_bytes=weights)
