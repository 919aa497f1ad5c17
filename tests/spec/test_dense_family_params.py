"""Dense families whose MLP has no gate projection (up/down only: Arcee's ReLU^2, Apertus' xIELU; a
gated count would be 3/2 of the MLP), against the transformers modules on the meta device (shapes only)."""
from __future__ import annotations

import pytest

from kvplan.spec.model import spec_from_config

_C = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=300, num_hidden_layers=2,
          intermediate_size=96)


@pytest.mark.parametrize("model_type", ["arcee", "apertus"])
def test_ungated_mlp_families(model_type):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(model_type, **_C)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    hf = sum(p.numel() for p in model.parameters())
    ours = spec_from_config(cfg.to_dict(), model_type).params.total
    assert ours == hf  # Apertus: with xIELU's two learned scalars per layer and its q/k norms
