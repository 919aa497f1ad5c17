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
from kvplan.spec.families import MODEL_TYPE, Family, Geometry, family_of, type_of
from kvplan.spec.geometry import attention_geometry, get, require_int
from kvplan.spec.layer import Layer
from kvplan.spec.layers import blocks_as_pattern, build_layers
from kvplan.spec.params import ParamCount, count_params, moe_shape
from kvplan.spec.quant import WeightQuant
from kvplan.validation import number_problem, short_repr

__all__ = ["Layer", "ModelSpec", "spec_from_config", "spec_from_path", "text_config"]

DEFAULT_MAX_MODEL_LEN = 2048  # vLLM's length when a config names none (and its class has no default)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    type_name: str  # the config's model type: transformers' and vLLM's name of its family
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
    # (routed experts, experts per token, expert width, shared experts) of the decoder; zeros for a dense model
    moe_shape: tuple[int, int, int, int] = (0, 0, 0, 0)
    # all-reduces over the TP group a forward pass adds beyond two per layer: a norm whose statistics span
    # heads split across GPUs (the family module says which; e.g. minimax_m2.py)
    tp_norm_allreduces: int = 0
    local_rope: bool = False  # a second rotary cache for the sliding layers (vLLM's rope_local_base_freq)

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

    def served_dtype(self, dtype: str | None) -> str:
        """The dtype `--dtype` serves this model in ('auto' or none: the checkpoint's own), decided
        once per setting for this model (the weights, activations, RoPE cache and KV sizing all ask)."""
        key = "auto" if dtype in ("auto", "", None) else str(dtype)
        found = self._served_dtypes.get(key)
        if found is None:
            found = self._served_dtypes[key] = self._decide_served_dtype(key)
        return found

    @cached_property
    def _served_dtypes(self) -> dict[str, str]:
        return {}

    def _decide_served_dtype(self, dtype: str) -> str:
        return self.dtype if dtype == "auto" else normalize_model_dtype(dtype)

    def kv_dtype(self, kv_cache_dtype: str, model_dtype: str | None = None) -> KvDtype:
        """What `--kv-cache-dtype` caches for this model, served in `model_dtype` (default: its own):
        the one place `auto`, the checkpoint's KV quantization and sparse MLA are decided, once per
        setting for this model (a plan asks it for every layer and every what-if; later asks read
        the answer)."""
        key = (str(kv_cache_dtype), model_dtype or self.dtype)
        found = self._kv_dtypes.get(key)
        if found is None:
            found = self._kv_dtypes[key] = self._decide_kv_dtype(*key)
        return found

    @cached_property
    def _kv_dtypes(self) -> dict[tuple[str, str], KvDtype]:
        return {}

    def _decide_kv_dtype(self, kv_cache_dtype: str, model_dtype: str) -> KvDtype:
        if self.has_fixed_layout:  # DeepSeek-V4: its fp8 layout
            key = kv_cache_dtype.lower()
            if key != "auto" and not key.startswith("fp8"):
                raise ConfigError(f"{self.name} caches DeepSeek-V4's fixed fp8 layout only (vLLM serves it so): "
                                  f"--kv-cache-dtype {kv_cache_dtype!r} is not possible; choices: auto, fp8")
            return KV_DTYPES["fp8_ds_mla"]
        return resolve_kv_dtype(kv_cache_dtype, model_dtype, sparse_mla=self.has_sparse_indexer,
                                checkpoint=self.quant.kv_cache_dtype,
                                auto_fp8_ds_mla=self.architecture in SPARSE_MLA_FP8_BY_DEFAULT)

    @cached_property
    def has_sparse_indexer(self) -> bool:
        """DeepSeek-V3.2 sparse MLA: vLLM serves it with the fp8_ds_mla cache and 64-token blocks."""
        return any(c.sparse_mla for layer in self.layers for c in layer.caches)

    @cached_property
    def has_fixed_layout(self) -> bool:
        """A cache with a byte layout of its own whatever --kv-cache-dtype says (DeepSeek-V4)."""
        return any(c.fixed_layout for layer in self.layers for c in layer.caches)

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


_OUTER_ONLY = ("text_config", "vision_config", "architectures", MODEL_TYPE)  # keys the text config has its own of


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder's config: `text_config` (Gemma 3, multimodal) merged over outer keys it lacks."""
    if not isinstance(config, dict):
        raise ConfigError(f"config must be a JSON object, got {type(config).__name__}")
    inner = config.get("text_config") or config.get("llm_config") or config.get("language_config")
    if isinstance(inner, dict):
        merged = {k: v for k, v in config.items() if k not in _OUTER_ONLY}
        merged.update({k: v for k, v in inner.items() if v is not None or k not in merged})
        merged.setdefault("architectures", config.get("architectures"))
        merged.setdefault(MODEL_TYPE, inner.get(MODEL_TYPE) or config.get(MODEL_TYPE))
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


def _serving_dtype(cfg: dict[str, Any], where: str) -> tuple[str, str | None]:
    raw = cfg.get("torch_dtype") or cfg.get("dtype")
    if raw is None:
        return "bfloat16", None
    dtype = normalize_model_dtype(str(raw))
    # vLLM's dtype="auto" serves float32 checkpoints in 16-bit (bfloat16 where supported).
    return ("bfloat16" if dtype == "float32" else dtype), dtype


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


def _with_defaults(cfg: dict[str, Any], family: Family, where: str) -> dict[str, Any]:
    """The family's own key names lifted, then its class defaults under the config's keys."""
    if family.normalize is not None:
        cfg = family.normalize(cfg, where)
    defaults = family.defaults
    return {**defaults, **{k: v for k, v in cfg.items() if v is not None or k not in defaults}}


def _geometry(cfg: dict[str, Any], family: Family, hidden: int, where: str) -> Geometry:
    own = family.geometry(cfg, hidden, where) if family.geometry is not None else None
    return own or attention_geometry(cfg, hidden, where)


def _layers(cfg: dict[str, Any], outer: dict[str, Any], family: Family, n_layers: int, att: Geometry, max_pos: int,
            where: str) -> tuple[Layer, ...]:
    if family.layers is not None:
        return family.layers(cfg, n_layers, att.n_heads, att.head_dim, where)
    return build_layers(cfg, outer, n_layers, att, max_pos, where, family)


def _notes(outer: dict[str, Any], cfg: dict[str, Any], family: Family, quant: WeightQuant) -> tuple[str, ...]:
    """What the spec approximates or does not read: unread keys, quantization, the family's own note,
    an unchecked model type."""
    unread = unread_keys_warning(outer, cfg)
    notes = ((unread,) if unread else ()) + quant.notes + ((family.note,) if family.note else ())
    unchecked = unchecked_type_warning(family, type_of(cfg))
    return notes + ((unchecked,) if unchecked else ())


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
    text = text_config(outer)
    family = family_of(text)
    cfg = _with_defaults(text, family, where)
    if family.layer_words is None:  # a family with its own layout reads its own keys (Zamba2's block types)
        cfg = blocks_as_pattern(cfg, where)
    if get(cfg, "num_hidden_layers") is None and isinstance(cfg.get("hybrid_override_pattern"), str):
        cfg["num_hidden_layers"] = len(cfg["hybrid_override_pattern"])  # Nemotron-H: one character per layer
    n_layers = require_int(cfg, "num_hidden_layers", where)
    hidden = require_int(cfg, "hidden_size", where)
    att = _geometry(cfg, family, hidden, where)
    vocab = get(cfg, "vocab_size")
    if vocab is None:
        raise ConfigError(f"{where}: missing required field 'vocab_size'")
    max_pos = int(get(cfg, "max_position_embeddings", 0) or 0) or DEFAULT_MAX_MODEL_LEN
    max_len_known = bool(get(cfg, "max_position_embeddings", 0))
    inter = _intermediate(cfg, hidden, where)
    layers = _layers(cfg, outer, family, n_layers, att, max_pos, where)
    dtype, config_dtype = _serving_dtype(cfg, where)
    params = count_params(cfg, family, layers=layers, hidden=hidden, n_heads=att.n_heads, kv_heads=att.kv_heads,
                          head_dim=att.head_dim, intermediate=inter, vocab=int(vocab),
                          encoder=encoder_params(outer, hidden))
    archs = outer.get("architectures") or cfg.get("architectures") or [type_of(cfg, "unknown")]
    quant = weight_quant_from_config(outer, {"attention": sum(1 for layer in layers if layer.attends),
                                             "mixer": sum(1 for layer in layers if layer.state is not None)})
    if family.fp8_groups is not None and quant.method == "fp8" and not quant.groups:
        quant = replace(quant, groups=family.fp8_groups(cfg)) if family.fp8_groups(cfg) else quant
    notes = _notes(outer, cfg, family, quant)
    return ModelSpec(
        name=name,
        type_name=type_of(cfg, "unknown"),
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
        moe_shape=moe_shape(cfg),
        tp_norm_allreduces=family.tp_norm_allreduces(cfg, len(layers)) if family.tp_norm_allreduces else 0,
        local_rope=bool(cfg.get("rope_local_base_freq")) or family.local_rope,
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
