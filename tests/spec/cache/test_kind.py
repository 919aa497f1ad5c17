"""`CacheKind`'s defaults: a cache of one entry per token in whole blocks, array-friendly arithmetic."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvplan.spec.cache.kind import CacheKind, cap, ceil_div
from kvplan.spec.dtypes import KV_DTYPES


@dataclass(frozen=True)
class _TenBytes(CacheKind):
    kind = "ten"

    def entry_bytes(self, kv_dtype, tp):  # noqa: ANN001, ANN201
        return 10


def test_defaults_of_a_per_token_cache() -> None:
    c, bf16 = _TenBytes(), KV_DTYPES["bfloat16"]
    assert c.page_bytes(16, bf16, 1) == 160
    assert c.request_blocks(17, 16) == 2 and c.request_blocks(0, 16) == 0
    assert c.request_bytes(17, 16, bf16, 1) == 320 and c.request_bytes(17, 16, bf16, 1, paged=False) == 170
    assert c.pool_blocks(1000, 8192, 16) == 63
    assert c.token_bytes(bf16, 1) == 10 and c.shares_prefix(100)


def test_helpers_work_on_arrays() -> None:
    assert list(cap(np.array([5, 50]), 10)) == [5, 10] and cap(50, 10) == 10
    assert list(ceil_div(np.array([15, 16, 17]), 16)) == [1, 1, 2]
