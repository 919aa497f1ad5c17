"""The Qwen-VL towers (Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5's): equal to the Hugging Face modules of
tiny configs on the meta device; the profile run's dummy image as the image processors size it."""
from __future__ import annotations

import pytest
from family_oracle import tower_vs_transformers

from kvplan.spec.families.qwen_vision import qwen2_5_vl_profile, qwen3_vl_profile


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_matches_transformers(model_type: str) -> None:
    kvplan, transformers = tower_vs_transformers(model_type)
    assert kvplan == transformers


def test_dummy_images() -> None:
    # Qwen2.5-VL: max_pixels 12,845,056 -> 3,584 px; patch 14, merge 2: 128 cells of 2 a side = 256 patches a side
    assert qwen2_5_vl_profile({}, {"patch_size": 14}, {}, 8192, None) == {"image": (16384, 65536)}
    # a 32K model also profiles a video: 7 temporal slices of 16,384 tokens (14 frames, 2 per slice)
    assert qwen2_5_vl_profile({}, {"patch_size": 14}, {}, 131072, None)["video"] == (7 * 16384, 7 * 65536)
    # Qwen3-VL: longest_edge 16,777,216 -> 4,096 px, patch 16, merge 2: 256 patches a side
    assert qwen3_vl_profile({}, {"patch_size": 16}, {}, 8192, None) == {"image": (16384, 65536)}
