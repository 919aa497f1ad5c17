"""`Family`: what a family module tells the generic spec code about its model types. Every part is
optional; an absent part means the generic decoder rule (kvplan.spec.layers, params, mixer_params,
state), which never asks which model it reads.

The parts, in the order a config is read:
    defaults        keys the family's transformers config class fills in when a published config.json
                    omits them (Gemma 2's head_dim 256, Qwen2's 32,768 positions, ...)
    normalize       lift keys a family nests or names its own way (DBRX's attn_config, Nemotron-H's
                    layers_block_type as a pattern)
    geometry        attention heads, KV heads and head size when the generic reading does not hold
                    (attention-free Mamba, Falcon's multi-query, Zamba2's 2 x hidden heads)
    layer_words     one word per layer (full, sliding, chunked, cross, mlp, mamba1, mamba2, gdn, kda,
                    short_conv, linear, full+mamba2) for layouts the generic keys do not describe
    windows         which layers a config's `sliding_window` applies to
    layer_geometry  (KV heads, head size) of layer i when layers differ (Gemma 4's full layers)
    layers          every layer's caches, replacing all of the above (DeepSeek-V4, MiMo-V2, ...)
    state           a state layer's `RecurrentState` when the family names its dimensions its own way
    mlp_plan        "dense" / "moe" / "none" per layer when the MoE step keys do not say
    traits          the generic parameter count's switches (biases, norms, gated MLP, ...)
    counts          the whole parameter count, replacing the generic one
    extra_params    parameters the generic count lacks (Gemma-3n's AltUp, Zamba2's shared blocks)
    tower           the vision tower this decoder's checkpoints carry when vision_config does not name it
    fp8_groups, tp_norm_allreduces, local_rope   what the weights, a TP forward pass and vLLM's
                    rotary cache need to know
    checked         how the family's counts and widths were checked ("transformers": its modules
                    on the meta device, tests/data/transformers_crosscheck.json; "hand": published
                    checkpoints, start-up logs); "" plans with a warning
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvplan.spec.cache.state import RecurrentState
    from kvplan.spec.layer import Layer

Config = dict[str, Any]
# layers(cfg, n_layers, n_heads, head_dim, where) -> what each decoder layer caches
LayersRule = Callable[[Config, int, int, int, str], "tuple[Layer, ...]"]
# counts(cfg, n_layers, hidden, n_heads, head_dim, vocab, where) -> ParamCount fields
CountsRule = Callable[[Config, int, int, int, int, int, str], dict[str, int]]
# fp8_groups(cfg) -> WeightQuant.groups of a plain fp8 checkpoint whose own keys say more (or ())
GroupsRule = Callable[[Config], tuple[tuple[str, int, int], ...]]
# tp_norm_allreduces(cfg, n_layers) -> all-reduces over the TP group a forward pass adds beyond two per layer
NormsRule = Callable[[Config, int], int]


@dataclass(frozen=True)
class Geometry:
    """The attention geometry a model's attention layers share (zeros for an attention-free model)."""

    n_heads: int
    kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class Traits:
    """Switches of the generic decoder's parameter count (kvplan.spec.params); defaults: a Llama."""

    gated_mlp: bool = True  # dense MLPs: gate, up and down projections (False: up and down only)
    gated_experts: bool = True  # routed and shared experts: gate, up and down
    mlp_bias: bool = False
    layernorm_bias: bool = False  # LayerNorm with a bias (2 h a norm) instead of RMSNorm (h)
    norms_per_layer: int | Callable[[Config], int] = 2
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False  # per-head q and k norms
    qk_norm_full_width: bool = False  # q and k normed over all heads at once (MiniMax-M2)
    gated_attention: bool = False  # q_proj also emits an output gate unless `attn_output_gate` is false
    attention_sinks: bool = False  # one learned sink per head (gpt-oss)
    tied_by_default: bool = False  # tie_word_embeddings when the config does not say
    lm_head_bias: bool = False
    expert_bias: bool = False  # gate_up and down biases in every expert (gpt-oss)
    router_bias: bool = False  # a per-expert router bias or score correction
    own_shared_width: bool = False  # shared experts `shared_expert_intermediate_size` wide, no gate of their own
    shared_mlp_key: str = ""  # a shared MLP beside the experts, this key its width (Granite MoE)
    extra_per_layer_mlp: int = 0  # MLP parameters a layer has beyond its projections (Apertus' xIELU: 2)
    positions: Callable[[Config], int] | None = None  # learned position embeddings (rows) of GPT-2 / OPT
    dense_intermediate_key: str = ""  # the dense MLP's width key when it differs from the experts' (Llama-4)
    # state mixers (kvplan.spec.mixer_params)
    mixer_bias_keys: tuple[str, ...] = ("mamba_proj_bias", "use_bias")
    mamba_inner_norm: Callable[[Config], bool] | None = None  # the gated norm over the inner width (default: on)
    mamba1_dt_norms: bool = False  # dt, B and C layer norms (Jamba)
    one_norm_per_block: bool = False  # each block one mixer or MLP with one norm (Mamba, Nemotron-H)


@dataclass(frozen=True)
class Family:
    model_types: frozenset[str]
    vllm_source: str  # the vLLM model file the rules follow
    architectures: frozenset[str] = frozenset()  # also owned when `architectures[0]` is one of these
    checked: str = ""  # "transformers" or "hand" (see the module doc); "" plans with a warning
    unchecked: frozenset[str] = frozenset()  # model types it owns that were not checked (warned)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    normalize: Callable[[Config, str], Config] | None = None
    geometry: Callable[[Config, int, str], Geometry | None] | None = None
    layer_words: Callable[[Config, int, str], list[str] | None] | None = None  # None: the generic layout
    windows: Callable[[Config, int, int], list[int | None]] | None = None
    layer_geometry: Callable[[Config, int, bool, int, int], tuple[int, int]] | None = None
    layers: LayersRule | None = None
    state: Callable[[str, Config, int, str], RecurrentState | None] | None = None
    mlp_plan: Callable[[Config, int], list[str] | None] | None = None
    traits: Traits = Traits()
    counts: CountsRule | None = None
    extra_params: Callable[..., dict[str, int]] | None = None
    tower: str = ""  # the vision tower's family name (kvplan.spec.families.towers) when vision_config is silent
    fp8_groups: GroupsRule | None = None
    tp_norm_allreduces: NormsRule | None = None
    local_rope: bool = False  # a second rotary cache for the sliding layers (Gemma 3)
    note: str = ""  # what the plan approximates for this family (a warning on every plan of it)
    read_keys: frozenset[str] = frozenset()  # config keys the family reads (not "unread" for the warning)

    def has_checked(self, type_name: str) -> bool:
        """Whether this family's rules were checked for `type_name` (an owning family, by model type or
        by architecture for a renamed checkpoint, unless it lists the type as unchecked)."""
        return bool(self.checked) and type_name not in self.unchecked
