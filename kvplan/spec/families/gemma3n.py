"""Gemma-3n (`gemma3n`, `gemma3n_text`; vLLM gemma3n.py / gemma3n_mm.py): a Gemma decoder whose last
`num_kv_shared_layers` layers read an earlier layer's K/V (the generic rule), per-head q/k norms, and its
parameters beyond a Gemma decoder: the per-layer embeddings, AltUp and LAuReL blocks of
the text model, and the audio tower (a Conformer) with the embedders that feed both towers into the text
model. Shapes as transformers' modeling_gemma3n.py builds them (vLLM gemma3n.py / gemma3n_mm.py load the
same checkpoint); h: text hidden, L: layers, p: hidden_size_per_layer_input, A: altup_num_inputs,
r: laurel_rank.

    per layer      AltUp: output scale h, correction A x A, prediction A^2 x A, router A x h + norm h;
                   LAuReL: h x r + r x h + norm h; per-layer input gate h x p, projection p x h + norm h;
                   four norms around attention and MLP (the caller counts two)
    whole model    per-layer embeddings V_pl x L p, their projection h x L p + norm p,
                   AltUp projections and unembed projections 2 (A - 1) h^2
    audio tower    sub-sampling convs (c0 x 3 x 3 + c0, c1 x c0 x 3 x 3 + c1) and a projection to a;
                   per Conformer block (a: audio hidden, K: conv kernel): two macaron feed-forwards
                   2 (8 a^2 + 2a), attention 5 a^2 + 2a + a / heads, light conv 3 a^2 + a K + 2a, norm a
    embedders      per modality: vocab x mm hidden, two norms, projection mm hidden x h

The vision tower (timm's MobileNetV5, named only by `vision_config.architecture`) cannot be counted from
the config: it is left out, and the tower's `exact` and `gap` say so.
"""
from __future__ import annotations

from typing import Any

from kvplan.spec.config_schema import positive_int
from kvplan.spec.families.family import Family, Traits
from kvplan.spec.families.tower import Tower


def text_extras(cfg: dict[str, Any], hidden: int, n_layers: int) -> tuple[int, int, int]:
    """(embedding, linear, norm) parameters the Gemma decoder count lacks."""
    a, r = positive_int(cfg, "altup_num_inputs", 4), positive_int(cfg, "laurel_rank", 64)
    p = positive_int(cfg, "hidden_size_per_layer_input", 256)
    vocab_pl = positive_int(cfg, "vocab_size_per_layer_input", positive_int(cfg, "vocab_size", 0))
    embedding = vocab_pl * n_layers * p
    per_layer_linear = a * a + a * a * a + a * hidden + 2 * hidden * r + 2 * hidden * p
    linear = n_layers * per_layer_linear + hidden * n_layers * p + 2 * (a - 1) * hidden * hidden
    # AltUp output scale and router norm, LAuReL norm, per-layer-input norm, and the 2 of the 4 layer norms the caller
    # lacks
    per_layer_norms = 6 * hidden
    return embedding, linear, n_layers * per_layer_norms + p


def _conv_out(size: int, kernel: int, stride: int) -> int:
    """One sub-sampling conv along frequency: `kernel // 2` padding each side (modeling_gemma3n.py)."""
    return (size + 2 * (kernel // 2) - kernel) // stride + 1


def _embedder(mm: dict[str, Any], text_hidden: int) -> int:
    h = positive_int(mm, "hidden_size", 0)
    return positive_int(mm, "vocab_size", 128) * h + 2 * h + h * text_hidden


def audio_params(audio: dict[str, Any], text_hidden: int) -> int:
    """The audio tower and its embedder (0 without an audio_config)."""
    a = positive_int(audio, "hidden_size", 0)
    if not a:
        return 0
    heads, kernel = positive_int(audio, "conf_num_attention_heads", 8), positive_int(audio, "conf_conv_kernel_size", 5)
    channels = audio.get("sscp_conv_channel_size") or [128, 32]
    kernels = audio.get("sscp_conv_kernel_size") or [[3, 3], [3, 3]]
    strides = audio.get("sscp_conv_stride_size") or [[2, 2], [2, 2]]
    subsample, prev, freq = 0, 1, positive_int(audio, "input_feat_size", 128)
    for c, (kt, kf), (_, sf) in zip(channels, kernels, strides):
        subsample += int(c) * prev * int(kt) * int(kf) + int(c)  # conv + its norm
        prev, freq = int(c), _conv_out(freq, int(kf), int(sf))
    subsample += prev * freq * a  # input_proj_linear
    block = 2 * (8 * a * a + 2 * a) + (5 * a * a + 2 * a + a // heads) + (3 * a * a + a * kernel + 2 * a) + a
    return subsample + positive_int(audio, "conf_num_hidden_layers", 12) * block + _embedder(audio, text_hidden)


def vision_embedder_params(vision: dict[str, Any], text_hidden: int) -> int:
    """The vision embedder (soft tokens into the text model); the MobileNetV5 tower itself is not counted."""
    return _embedder(vision, text_hidden)


def gemma3n_extras(cfg: dict[str, Any], counts: dict[str, int], *, hidden: int, n_layers: int,
                   **_: Any) -> dict[str, int]:
    embedding, linear, norms = text_extras(cfg, hidden, n_layers)
    return {**counts, "embedding": counts["embedding"] + embedding, "mlp_dense": counts["mlp_dense"] + linear,
            "norms": counts["norms"] + norms}


def towers_params(outer: dict[str, Any], vision: dict[str, Any], text_hidden: int) -> int:
    """Both embedders and the audio tower; the MobileNetV5 vision tower is not counted."""
    return vision_embedder_params(vision, text_hidden) + audio_params(outer.get("audio_config") or {}, text_hidden)


def _tower_gap(outer: dict[str, Any]) -> str:
    arch = (outer.get("vision_config") or {}).get("architecture") or "MobileNetV5"
    return (f"the vision tower (timm {arch}, named but not described by config.json) is not counted: "
            "weights are under-predicted by its size")


FAMILY = Family(
    frozenset({"gemma3n", "gemma3n_text"}),
    "vllm/model_executor/models/gemma3n.py",
    checked="hand",
    traits=Traits(qk_norm=True),
    extra_params=gemma3n_extras,
)
TOWER = Tower("gemma3n", vision_types=("gemma3n_vision",), carriers=("gemma3n",), params=towers_params, exact=False,
              gap=_tower_gap, counts_audio=True)
