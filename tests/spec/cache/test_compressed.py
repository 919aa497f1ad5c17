"""DeepSeek-V4's compressed cache, by hand from deepseek_v4.py's layout: one 584-byte entry (plus the
indexer's 132 at ratio 4) per `ratio` tokens of the whole request."""
from __future__ import annotations

from fractions import Fraction

from kvplan.spec.cache import CompressedEntries
from kvplan.spec.dtypes import KV_DTYPES

BF16 = KV_DTYPES["bfloat16"]


def test_entries_per_ratio_tokens() -> None:
    csa = CompressedEntries(4, 584 + 132)
    assert csa.token_bytes(BF16, 1) == Fraction(716, 4)
    assert csa.page_bytes(128, BF16, 8) == 32 * 716  # a 128-token block holds 32 entries, on every rank
    assert csa.request_bytes(4096, 128, BF16, 1, paged=False) == 1024 * 716
    assert csa.request_bytes(4097, 128, BF16, 1) == 33 * 32 * 716  # paged: whole blocks
    assert csa.block_multiple == 4 and not csa.pool_modelled and not csa.shares_prefix(4096)


def test_heavy_compression() -> None:
    hca = CompressedEntries(128, 584)
    assert hca.request_bytes(4096, 128, BF16, 1, paged=False) == 32 * 584
    assert hca.page_bytes(128, BF16, 1) == 584
