"""MoonViT (Kimi-VL): the profile run's dummy image scaled to the processor's 4,096-patch in_token_limit
(1,024 px / 14 = 73 patches a side > 64; int(1024 x sqrt(4096 / 5329)) = 897 px; 33 merged cells of
2 a side: 66 x 66 = 4,356 patches, T = 1,089), and a tower TP does not split."""
from __future__ import annotations

from kvplan.spec.families.moonvit import TOWER, moonvit_profile


def test_dummy_image() -> None:
    assert moonvit_profile({}, {"patch_size": 14}, {}, 8192, None) == {"image": (1089, 4356)}
    assert TOWER.replicated
