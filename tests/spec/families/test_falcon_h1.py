"""Falcon-H1: attention and Mamba2 side by side in every layer; the mixer's gated norm only with
mamba_rms_norm."""
from __future__ import annotations

from family_oracle import assert_exact, spec

MIXER = {"mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 16, "mamba_n_groups": 1, "mamba_d_ssm": 128}


def test_matches_transformers() -> None:
    assert_exact("falcon_h1")


def test_every_layer_runs_both() -> None:
    plain, normed = spec("falcon_h1", **MIXER), spec("falcon_h1", mamba_rms_norm=True, **MIXER)
    assert {layer.label for layer in plain.layers} == {"full+mamba2"}
    assert normed.params.mixer - plain.params.mixer == 4 * 128  # one gated norm over d_ssm per layer
