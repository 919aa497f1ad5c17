"""`KVCache`: the block pool tensors, sized from a byte budget through `plan.kv.bytes_per_block`.

Layout (one tensor for every layer, so the pool is exactly `num_blocks * bytes_per_block` bytes):
  kv      [num_layers, 2 (K, V), num_blocks, block_size, num_kv_heads, head_dim]  storage dtype
  scales  [num_layers, 2, num_blocks, block_size, num_kv_heads] float16            int8 only
fp8 stores float8_e4m3fn with one per-tensor scale (vLLM's k_scale/v_scale, default 1.0), held as
a Python float rather than in the pool, as the planner counts it. The CPU swap pool has the same
layout with its own block count.
"""
from __future__ import annotations

import torch

from kvplan.errors import KvplanError
from kvplan.plan.kv import blocks_in_budget, bytes_per_block
from kvplan.spec.dtypes import KvDtype, resolve_kv_dtype
from kvplan.spec.model import ModelSpec

FP8_MAX = 448.0  # largest finite float8_e4m3fn
INT8_MAX = 127.0


def kv_dtype_name(kv_cache_dtype: str, model_dtype: torch.dtype) -> str:
    """Resolve "auto" to the dtype the engine really runs the model in (not the spec's serving dtype)."""
    model_name = str(model_dtype).removeprefix("torch.")
    return resolve_kv_dtype(kv_cache_dtype, model_name).name


def num_blocks_for_budget(spec: ModelSpec, kv_cache_memory_bytes: int, block_size: int, kv_dtype: str) -> int:
    """The planner's block count for a byte budget: the engine's pool uses exactly this."""
    return blocks_in_budget(kv_cache_memory_bytes, bytes_per_block(spec, block_size, kv_dtype))


class KVCache:
    """Device pool (plus an optional CPU pool for swapping); writes and reads whole slots."""

    def __init__(self, spec: ModelSpec, num_blocks: int, block_size: int, kv_dtype: str, compute_dtype: torch.dtype,
                 device: torch.device | str = "cpu", num_cpu_blocks: int = 0, num_tier_blocks: int = 0) -> None:
        heads = {(layer.num_kv_heads, layer.head_dim_k, layer.head_dim_v) for layer in spec.layers}
        if len(heads) != 1 or any(layer.kind not in ("full", "sliding") for layer in spec.layers):
            raise KvplanError(
                f"{spec.name}: the engine needs the same K/V heads in every layer (got {sorted(heads)}; MLA is not "
                "supported)"
            )
        self.num_kv_heads, self.head_dim, head_dim_v = heads.pop()
        if head_dim_v != self.head_dim:
            raise KvplanError(
                f"{spec.name}: the engine needs equal K and V head dims, got {self.head_dim} and {head_dim_v}"
            )
        self.spec = spec
        self.num_layers = spec.num_layers
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.kv_dtype: KvDtype = resolve_kv_dtype(kv_dtype, str(compute_dtype).removeprefix("torch."))
        self.compute_dtype = compute_dtype
        self.storage_dtype: torch.dtype = getattr(torch, self.kv_dtype.torch_name)
        self.quantized = self.kv_dtype.name in ("fp8", "fp8_e4m3", "int8")
        self.fp8_scale = 1.0
        self.bytes_per_block = bytes_per_block(spec, block_size, self.kv_dtype.name)
        self.device = torch.device(device)
        self.kv, self.scales = self._allocate(num_blocks, self.device)
        pin = self.device.type == "cuda"  # pinned host memory makes swap copies asynchronous
        self.cpu_kv: torch.Tensor | None = None
        self.cpu_scales: torch.Tensor | None = None
        if num_cpu_blocks:
            self.cpu_kv, self.cpu_scales = self._allocate(num_cpu_blocks, "cpu", pin)
        self.num_cpu_blocks = num_cpu_blocks
        # the CPU tier's host blocks (`kv_offloading_bytes`): blocks copied out and back by hash
        self.tier_kv: torch.Tensor | None = None
        self.tier_scales: torch.Tensor | None = None
        if num_tier_blocks:
            self.tier_kv, self.tier_scales = self._allocate(num_tier_blocks, "cpu", pin)
        self.num_tier_blocks = num_tier_blocks
        if self.nbytes != num_blocks * self.bytes_per_block:
            raise KvplanError(f"KV pool layout ({self.nbytes} bytes) disagrees with plan.kv.bytes_per_block "
                              f"({num_blocks} x {self.bytes_per_block}); {spec.name} is not supported by the engine")

    def _allocate(
        self, num_blocks: int, device: torch.device | str, pin: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        shape = (self.num_layers, 2, num_blocks, self.block_size, self.num_kv_heads, self.head_dim)
        kv = torch.zeros(shape, dtype=self.storage_dtype, device=device, pin_memory=pin)
        scales = None
        if self.kv_dtype.scale_bytes_per_token_head:
            scales = torch.zeros(shape[:-1], dtype=torch.float16, device=device, pin_memory=pin)
        return kv, scales

    @property
    def nbytes(self) -> int:
        """Bytes of the device pool (equals `num_blocks * bytes_per_block`)."""
        return self.kv.nbytes + (self.scales.nbytes if self.scales is not None else 0)

    # --- write / read -------------------------------------------------------------------------
    def _quantize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [T, kvh, D] compute dtype -> storage tensor (+ int8 scales [T, kvh])."""
        if self.kv_dtype.name == "int8":
            scale = x.abs().amax(dim=-1).float().clamp(min=1e-8) / INT8_MAX
            scale = scale.to(torch.float16)  # round the scale first so stored values match its stored form
            q = (x.float() / scale.float().unsqueeze(-1)).round().clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
            return q, scale
        if self.storage_dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            return (x.float() / self.fp8_scale).clamp(-FP8_MAX, FP8_MAX).to(self.storage_dtype), None
        return x.to(self.storage_dtype), None

    def write(self, layer: int, slot_mapping: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        """Store new K/V [T, kvh, D] at pool slots `slot_mapping` [T] (block_id * block_size + offset)."""
        for i, x in enumerate((key, value)):
            q, scale = self._quantize(x)
            dest = self.kv[layer, i].view(-1, self.num_kv_heads, self.head_dim)
            if self.storage_dtype.itemsize == 1 and self.storage_dtype is not torch.int8:
                dest, q = dest.view(torch.uint8), q.view(torch.uint8)  # index_copy_ has no float8 kernel on CPU
            dest.index_copy_(0, slot_mapping, q)
            if scale is not None and self.scales is not None:
                self.scales[layer, i].view(-1, self.num_kv_heads).index_copy_(0, slot_mapping, scale)

    def gather(self, layer: int, block_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of blocks `block_ids` [M] -> two [M, block_size, kvh, D] tensors in the compute dtype."""
        out = []
        for i in (0, 1):
            x = self.kv[layer, i].index_select(0, block_ids)
            if self.quantized:
                if self.scales is not None:
                    s = self.scales[layer, i].index_select(0, block_ids)
                    x = x.to(self.compute_dtype) * s.to(self.compute_dtype).unsqueeze(-1)
                else:
                    x = x.to(self.compute_dtype) * self.fp8_scale
            elif x.dtype != self.compute_dtype:
                x = x.to(self.compute_dtype)
            out.append(x)
        return out[0], out[1]

    # --- swapping -----------------------------------------------------------------------------
    def _copy(self, src: torch.Tensor, dst: torch.Tensor, src_ids: list[int], dst_ids: list[int]) -> None:
        s = torch.tensor(src_ids, device=src.device)
        d = torch.tensor(dst_ids, device=dst.device)
        dst.index_copy_(2, d, src.index_select(2, s).to(dst.device))  # blocking: the next forward may reuse the blocks

    def swap_out(self, pairs: tuple[tuple[int, int], ...]) -> None:
        """Copy device blocks to CPU blocks: pairs of (device, cpu)."""
        self._swap(pairs, to_cpu=True)

    def swap_in(self, pairs: tuple[tuple[int, int], ...]) -> None:
        """Copy CPU blocks back to device blocks: pairs of (cpu, device)."""
        self._swap(pairs, to_cpu=False)

    def _swap(self, pairs: tuple[tuple[int, int], ...], *, to_cpu: bool) -> None:
        if not pairs:
            return
        src_ids, dst_ids = (list(ids) for ids in zip(*pairs))
        assert self.cpu_kv is not None, "swap needs the CPU pool (swap_space_bytes > 0)"
        kv = (self._raw(self.kv), self._raw(self.cpu_kv))
        order = (0, 1) if to_cpu else (1, 0)
        self._copy(kv[order[0]], kv[order[1]], src_ids, dst_ids)
        if self.scales is not None and self.cpu_scales is not None:
            scales = (self.scales, self.cpu_scales)
            self._copy(scales[order[0]], scales[order[1]], src_ids, dst_ids)

    def tier_copy(self, pairs: tuple[tuple[int, int], ...], *, to_tier: bool) -> None:
        """Copy blocks to the CPU tier ((device, host) pairs) or back ((host, device) pairs)."""
        if not pairs:
            return
        assert self.tier_kv is not None, "the CPU tier needs kv_offloading_bytes > 0"
        src_ids, dst_ids = (list(ids) for ids in zip(*pairs))
        pools = (self._raw(self.kv), self._raw(self.tier_kv))
        src, dst = pools if to_tier else pools[::-1]
        self._copy(src, dst, src_ids, dst_ids)
        if self.scales is not None and self.tier_scales is not None:
            src_s, dst_s = (self.scales, self.tier_scales) if to_tier else (self.tier_scales, self.scales)
            self._copy(src_s, dst_s, src_ids, dst_ids)

    @staticmethod
    def _raw(x: torch.Tensor) -> torch.Tensor:
        return x.view(torch.uint8) if x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else x
