"""GPU step time from measured kernels: each op of one engine step looked up in AIConfigurator's
vLLM timing tables (`kernel_tables`), a physical roofline only for the ops it has not measured.

One step on one GPU of a TP group (pipeline stages run in turn, as in `gpu_cost`):

    per attention layer   QKV and O GEMMs (m = the step's tokens; bf16 where the checkpoint keeps
                          attention unquantized, `kernel_dtypes`); context attention of the prefill
                          chunks (the table's full-prompt time scaled to the chunk's query x key
                          pairs); generation attention of the decode requests (batch, mean context)
    per MLP layer         gate_up and down GEMMs; an MoE layer: the measured fused-MoE kernel at
                          the step's tokens (router (bf16, as vLLM builds it) and shared experts as GEMMs)
    per layer             norms, rotary and activations: HBM traffic at the roofline (unmeasured)
    TP > 1                two all-reduces per layer of tokens x hidden bf16 values (vLLM's custom
                          all-reduce: CUDA-graph timings, eager ones above the captured sizes)
    LM head               m = the requests that sample a token (bf16: vLLM never quantizes it)
    untimed kernels       per layer 4 (add-norms, rotary, KV-cache write), per MoE layer 8 more
                          (routing): each at least `kernel_floor_s`, the tables time none of them
    eager steps           (above the largest captured CUDA graph) the GEMMs' host work (an 8-bit
                          table's time above the bf16 kernel's, `kernel_grids.MeasuredGemm`) runs
                          beside the GPU's: the forward pass takes the longer of the two
    host                  kvplan's fitted per-step CPU cost: after the GPU's work, or beside it
                          under async scheduling (a step takes the longer of the two), and the
                          per-request overheads (`gpu_cost.Coefficients`)

`sources` names, per op, the table (system, vLLM version) or "roofline" it was timed from.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from kvplan.errors import KvplanError
from kvplan.perf.gpu_cost import (
    ACTIVATION_BYTES,
    Coefficients,
    GpuStepModel,
    compute_peak_flops,
    fitted_coefficients,
    host_step_s,
    moe_layer_count,
)
from kvplan.perf.kernel_dtypes import kernel_dtypes, partly_kept_note, unquantized_tables
from kvplan.perf.kernel_grids import MeasuredGemm, attention_grids, collective_grids, gemm_grid, moe_grid
from kvplan.perf.kernel_sources import annotate_sources
from kvplan.perf.kernel_tables import AIC_SYSTEMS, LogGrid, data_root, kernels_missing, system_tables
from kvplan.perf.step_cost import StepShape
from kvplan.plan import overheads as oh
from kvplan.spec.gpu import GpuSpec
from kvplan.spec.model import ModelSpec

# vLLM V1 captures CUDA graphs for batches up to min(2 x max_num_seqs, 512) tokens; a larger step
# (a prefill chunk) runs its kernels eagerly. The default max_num_seqs (>= 256) makes that 512.
CUDAGRAPH_MAX_TOKENS = oh.MAX_CUDAGRAPH_CAPTURE_TOKENS
STANDARD_ATTENTION = ("full", "sliding", "chunked")  # q/k/v/o of head_dim: the measured attention tables' layout
# kernels vLLM runs outside the timed ops (counts read off its decoder layers; see `untimed_kernels`)
UNTIMED_PER_LAYER = 4
UNTIMED_PER_MOE_LAYER = 8


def measured_system(gpu: GpuSpec) -> tuple[str, Any]:
    """AIConfigurator's system name for the GPU and its tables' root, or a clear refusal."""
    why = kernels_missing(gpu.name)
    if why is not None:
        raise KvplanError(f"--perf-model kernels cannot time {gpu.name}: {why}; --perf-model roofline (or auto) "
                          "times it from the datasheet")
    return AIC_SYSTEMS[gpu.name], data_root()


@dataclass
class KernelStepModel:
    """`step_s(shape)` of one model on one measured GPU (the kvplan.perf.step_cost interface)."""

    spec: ModelSpec
    tp: int
    roofline: GpuStepModel  # the physical model: fallback ops and the host overheads
    gemm: MeasuredGemm | None
    context_attention: Callable[[float, float], float] | None
    generation_attention: LogGrid | None
    moe: Callable[[float], float] | None
    allreduce: Callable[[float], float] | None
    sources: dict[str, str] = field(default_factory=dict)
    dp: int = 1  # --data-parallel-size: replicas whose tokens meet in every MoE layer
    moe_allreduce: Callable[[float], float] | None = (
        None  # dp > 1: a MoE layer's exchange across replicas (kernel_grids)
    )
    # the same collectives launched eagerly: steps above the largest captured CUDA graph
    eager_allreduce: Callable[[float], float] | None = None
    eager_moe_allreduce: Callable[[float], float] | None = None
    plain_gemm: MeasuredGemm | None = None  # the bf16 table, for the layers vLLM builds unquantized:
    plain_tables: tuple[str, ...] = ()  # which of `_gemm_calls`' labels (kernel_dtypes.unquantized_tables)
    captured_tokens: int = CUDAGRAPH_MAX_TOKENS  # largest step a CUDA graph replays (0: --enforce-eager)
    peak_flops_per_s: float = 0.0
    bandwidth_bytes_per_s: float = 0.0
    overlaps_cpu: bool = False  # async scheduling: the CPU prepares step N+1 while the GPU runs step N

    @property
    def coefficients(self) -> Coefficients:
        return self.roofline.coefficients

    # --- ops, in ms ------------------------------------------------------------------------------
    def _gemm_ms(self, m: float, n: float, k: float) -> float:
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        if self.gemm is not None:
            return self.gemm(m, n, k)
        c = self.coefficients
        flops, read = 2.0 * m * n * k, 2.0 * n * k  # weights dominate the bytes of a small-m GEMM
        return 1e3 * max(flops / (self.peak_flops_per_s * c.gemm_efficiency),
                         read / (self.bandwidth_bytes_per_s * c.hbm_efficiency))

    def _grid(self, table: str) -> MeasuredGemm | None:
        """The measured GEMMs a `_gemm_calls` label runs on: bf16 for the unquantized layers, else
        the weights' dtype; None: the roofline."""
        return self.plain_gemm if table in self.plain_tables and self.plain_gemm is not None else self.gemm

    def _table_ms(self, table: str, m: float, n: float, k: float) -> float:
        grid = self._grid(table)
        return grid(m, n, k) if grid is not None and m > 0 else self._gemm_ms(m, n, k)

    def _gemm_calls(self, tokens: int, sampled: int) -> list[tuple[float, str, float, float, float]]:
        """(calls, label, m, n, k) of a step's dense GEMMs on one GPU: q/k/v/o of standard attention
        layers ("attention"), dense MLPs and shared experts ("mlp"), the LM head ("head", m = sampled
        requests), the MoE gate ("router", replicated) and the remaining linear weights from the
        hidden size (MLA's projections: "attention"; with state mixers: "dense")."""
        s, tp, h = self.spec, self.tp, self.spec.hidden_size
        d, heads, kv = s.head_dim, s.num_attention_heads, s.num_kv_heads
        attn, n_moe = self.standard_attention_layers, self.moe_layers
        n_exp, _, inter, n_shared = s.moe_shape
        n_dense, dense_inter = max(0, s.num_layers - n_moe), s.intermediate_size
        calls = [
            (attn, "attention", tokens, (heads + 2 * kv) * d / tp, h),
            (attn, "attention", tokens, h, heads * d / tp),
            (n_dense, "mlp", tokens, 2 * dense_inter / tp, h),
            (n_dense, "mlp", tokens, h, dense_inter / tp),
            (1, "head", sampled, s.vocab_size / tp, h),
            (n_moe, "router", tokens, n_exp, h),
        ]
        if n_moe and n_shared:
            calls += [
                (n_moe * n_shared, "mlp", tokens, 2 * inter / tp, h),
                (n_moe * n_shared, "mlp", tokens, h, inter / tp),
            ]
        if rest := self.other_weights / tp:
            calls.append((1, "dense" if s.params.mixer else "attention", tokens, rest / h, h))
        return [c for c in calls if c[0] and c[2] > 0 and c[3] > 0]

    @lru_cache(maxsize=4096)  # noqa: B019 - one model object per prediction; steps repeat their token counts
    def _host_gemm_ms(self, tokens: int, sampled: int) -> float:
        """The host work of a step's GEMMs (`MeasuredGemm.host`); only an eager step pays it
        (`_beside_launches`: a CUDA graph replays none)."""
        total = 0.0
        for calls, table, m, n, k in self._gemm_calls(tokens, sampled):
            grid = self._grid(table)
            total += calls * grid.host(m, n, k) if grid is not None else 0.0
        return total

    @lru_cache(maxsize=4096)  # noqa: B019 - one model object per prediction; steps repeat their token counts
    def _linear_ms(self, tokens: int, sampled: int) -> float:
        gemms, moe, comm, elementwise = self._linear_parts_ms(tokens, sampled)
        return gemms + moe + comm + elementwise

    def _linear_parts_ms(self, tokens: int, sampled: int) -> tuple[float, float, float, float]:
        """(dense GEMMs and the LM head, routed experts, TP / MoE-group all-reduces, memory-bound
        elementwise kernels) in ms, each from its table or the roofline."""
        s, h = self.spec, self.spec.hidden_size
        n_exp, k, inter, _ = s.moe_shape
        expert = 3 * h * inter if inter else 0
        n_moe = self.moe_layers
        gemms = sum(
            calls * self._table_ms(table, m, n_, k_) for calls, table, m, n_, k_ in self._gemm_calls(tokens, sampled)
        )
        mlp = 0.0
        group_tokens = tokens * self.dp  # every replica's batch goes through each MoE layer's experts
        if n_moe:
            routed = (
                self.moe(group_tokens)
                if self.moe is not None
                else self._moe_roofline_ms(group_tokens, n_exp, k, expert)
            )
            mlp = n_moe * routed
        comm = 0.0
        eager = tokens > self.captured_tokens
        group_moe = n_moe if self.dp > 1 else 0  # these layers reduce over the whole MoE group instead of TP
        if self.tp > 1:  # two a layer, and a norm spanning the TP group adds its fp32 statistics (4 values a token)
            comm = ((2 * s.num_layers - group_moe) * self._tp_allreduce_ms(tokens * h, eager)
                    + s.tp_norm_allreduces * self._tp_allreduce_ms(tokens * 4, eager))
        if group_moe:
            group = self.tp * self.dp
            values = group_tokens * h
            measured = (self.eager_moe_allreduce if eager else None) or self.moe_allreduce
            comm += group_moe * (
                measured(values) if measured is not None else self._allreduce_roofline_ms(values, group)
            )
        return gemms, mlp, comm, self._elementwise_ms(tokens)

    def _tp_allreduce_ms(self, values: float, eager: bool = False) -> float:
        measured = (self.eager_allreduce if eager else None) or self.allreduce
        return measured(values) if measured is not None else self._allreduce_roofline_ms(values, self.tp)

    @cached_property
    def elementwise_bytes_per_token(self) -> float:
        """HBM bytes one token moves through the memory-bound kernels between the GEMMs, on one GPU
        (bf16 activations): per layer two fused residual-add + RMSNorms (read hidden and residual,
        write both: 4h values, on every TP rank alike), rotary on q and k of standard attention
        (read + write), and SiLU-and-mul of dense and shared-expert MLPs (read 2 x inter, write
        inter); the routed experts' activation is inside the measured fused-MoE kernel."""
        s, tp = self.spec, self.tp
        n_exp, _, inter, n_shared = s.moe_shape
        n_moe = self.moe_layers
        norms = s.num_layers * 2 * 4 * s.hidden_size
        rotary = self.standard_attention_layers * 2 * (s.num_attention_heads + s.num_kv_heads) * s.head_dim / tp
        act = 3 * ((s.num_layers - n_moe) * s.intermediate_size + n_moe * n_shared * inter) / tp
        return ACTIVATION_BYTES * (norms + rotary + act)

    def _elementwise_ms(self, tokens: float) -> float:
        """Norms, rotary and activations: bandwidth-bound, timed by the roofline (not in the tables)."""
        return (
            1e3
            * tokens
            * self.elementwise_bytes_per_token
            / (self.bandwidth_bytes_per_s * self.coefficients.hbm_efficiency)
        )

    @cached_property
    def other_weights(self) -> float:
        """Linear weights (whole model) outside the ops timed by shape: what the parameter count
        holds beyond q/k/v/o of standard attention layers and the dense, shared and router GEMMs
        (MLA's down/up projections, state mixers, cross-attention); under 1% of the weights one token
        touches is noise."""
        s, p, h = self.spec, self.spec.params, self.spec.hidden_size
        heads, kv, d = s.num_attention_heads, s.num_kv_heads, s.head_dim
        std, n_moe = self.standard_attention_layers, self.moe_layers
        n_exp, _, inter, n_shared = s.moe_shape
        covered_attention = std * h * (heads + 2 * kv) * d + std * heads * d * h
        covered_mlp = (s.num_layers - n_moe) * 3 * h * s.intermediate_size + n_moe * (
            n_shared * 3 * h * inter + n_exp * h
        )
        rest = max(0, p.attention + p.mixer - covered_attention) + max(0, p.mlp_dense - covered_mlp)
        return float(rest) if rest > 0.01 * (p.linear - p.experts + p.experts_active) else 0.0

    def _moe_roofline_ms(self, tokens: float, n_exp: int, k: int, expert: int) -> float:
        """One MoE layer's experts on this GPU (1 / (dp x tp) of them) for the group's `tokens`."""
        c = self.coefficients
        group = self.tp * self.dp
        touched = 1.0 - (1.0 - k / n_exp) ** tokens
        layers = max(1, self.moe_layers)
        read = self.roofline.expert_bytes * touched / layers  # expert_bytes: this GPU's share, all layers
        flops = 2.0 * tokens * k * expert / group
        return 1e3 * max(read / (self.bandwidth_bytes_per_s * c.hbm_efficiency),
                         flops / (self.peak_flops_per_s * c.gemm_efficiency))

    def _allreduce_roofline_ms(self, values: float, gpus: int) -> float:
        r, c = self.roofline, self.coefficients
        latency, eff = ((c.nvlink_allreduce_latency_s, c.nvlink_efficiency) if r.nvlink
                        else (c.allreduce_latency_s, c.link_efficiency))
        return 1e3 * (latency + values * 2 * 2 * (gpus - 1) / gpus / (r.link_bytes_per_s * eff))

    @cached_property
    def attention_layers(self) -> int:
        return sum(n for n, _ in self.attention_groups)

    @cached_property
    def standard_attention_layers(self) -> int:
        """Layers with q/k/v/o projections of head_dim (timed as GEMMs of those shapes)."""
        return sum(1 for x in self.spec.layers if x.kind in STANDARD_ATTENTION)

    @cached_property
    def moe_layers(self) -> int:
        return moe_layer_count(self.spec)

    @cached_property
    def attention_groups(self) -> list[tuple[int, float | None]]:
        """(layers, window) of the attending layers: sliding-window and chunked layers attend to at
        most their window (chunk) of each request's tokens; None: the whole context."""
        counts: dict[float | None, int] = {}
        for x in self.spec.layers:
            if x.attends:
                span = x.attention.span if x.attention is not None else None
                w = float(span) if span else None
                counts[w] = counts.get(w, 0) + 1
        return [(n, w) for w, n in counts.items()]

    def _decode_attention_ms(self, decode_seqs: Any, decode_context: Any) -> Any:
        """One layer's generation attention of `decode_seqs` requests holding `decode_context` tokens
        (floats, or arrays for a stretch of decode steps: the same arithmetic either way)."""
        if self.generation_attention is None:
            layers = max(self.attention_layers, 1)
            return np.asarray(decode_context, dtype=float) * self.roofline.kv_bytes_per_token / layers / (
                self.bandwidth_bytes_per_s * self.coefficients.kv_efficiency) * 1e3
        if np.ndim(decode_context) == 0:  # one step: the plain-float lookup, the same floats as `batch`, faster
            return self.generation_attention(float(decode_seqs), max(1.0, float(decode_context) / decode_seqs))
        mean = np.maximum(1.0, np.asarray(decode_context, dtype=float) / decode_seqs)
        return self.generation_attention.batch(np.full(mean.shape, float(decode_seqs)), mean)

    def _decode_attention_all_ms(self, decode_seqs: Any, decode_context: Any) -> Any:
        """Every attending layer's generation attention (windowed layers read their window at most)."""
        total: Any = 0.0
        for count, window in self.attention_groups:
            ctx = decode_context if window is None else np.minimum(decode_context, decode_seqs * window)
            total = total + count * self._decode_attention_ms(decode_seqs, ctx)
        return total

    def _prefill_attention_ms(self, prefill_seqs: float, prefill_tokens: float, prefill_pairs: float) -> float:
        """One layer's context attention of the step's prefill chunks (query x key `prefill_pairs`)."""
        if self.context_attention is None:
            return self.roofline.attention_flops_per_pair * prefill_pairs / (
                self.roofline.attention_peak_flops_per_s * self.coefficients.attention_efficiency) * 1e3 / max(
                self.attention_layers, 1)
        # one sequence of the chunks' mean length, scaled to the chunks' query x key pairs
        length = max(1.0, (2.0 * prefill_pairs / max(prefill_seqs, 1.0)) ** 0.5)
        full = self.context_attention(1.0, length)
        return full * prefill_pairs / (length * (length + 1) / 2.0)

    def _attention_ms(self, prefill_seqs: float, prefill_tokens: float, prefill_pairs: float,
                      decode_seqs: float, decode_context: float) -> float:
        prefill = 0.0
        if prefill_tokens > 0 and prefill_pairs > 0:
            for count, window in self.attention_groups:  # a windowed query sees at most `window` keys
                pairs = prefill_pairs if window is None else min(prefill_pairs, prefill_tokens * window)
                prefill += count * self._prefill_attention_ms(prefill_seqs, prefill_tokens, pairs)
        if decode_seqs > 0:
            return prefill + float(self._decode_attention_all_ms(decode_seqs, float(decode_context)))
        return prefill

    # --- the step ---------------------------------------------------------------------------------
    def step_s(self, shape: StepShape) -> Any:
        return self._seconds(shape.num_tokens, shape.num_seqs, shape.num_prefill_tokens, shape.context_tokens,
                             shape.attention_pairs, shape.sampled, shape.num_prefill_seqs, shape.prefill_pairs)

    def components_s(self, shape: StepShape) -> dict[str, float]:
        """The GPU's work by op (dense GEMMs, routed experts, all-reduces, elementwise kernels,
        attention, the floors of kernels no table times, eager launches) and the host's time not
        hidden behind it: with async scheduling the host's runs beside the GPU's, so the step is
        the longer, not the sum. They add up to `step_s(shape)`."""
        total = float(self.step_s(shape))
        no_host = replace(self.coefficients, step_overhead_s=0.0, legacy_step_overhead_s=0.0, legacy_seq_overhead_s=0.0)
        idle = replace(self, roofline=replace(self.roofline, coefficients=no_host))
        gpu = float(idle.step_s(shape))
        tokens, sampled, prefill_tokens = int(shape.num_tokens), int(shape.sampled), int(shape.num_prefill_tokens)
        prefill_pairs = shape.prefill_pairs if shape.prefill_pairs is not None else max(
            0.0, float(shape.attention_pairs) - (float(shape.context_tokens) if not prefill_tokens else 0.0))
        p_seqs = float(shape.num_prefill_seqs) if shape.num_prefill_seqs is not None else float(bool(prefill_tokens))
        gemms, moe, comm, elementwise = (v / 1e3 for v in self._linear_parts_ms(tokens, sampled))
        attention = self._attention_ms(p_seqs, prefill_tokens, float(prefill_pairs), max(0, tokens - prefill_tokens),
                                       max(0.0, float(shape.attention_pairs) - float(prefill_pairs))) / 1e3
        untimed = self.untimed_kernels * self.coefficients.kernel_floor_s
        timed = gemms + moe + comm + elementwise + attention + untimed
        return {"dense GEMMs and LM head": gemms, "routed experts (MoE)": moe, "all-reduce": comm,
                "elementwise kernels": elementwise, "attention": attention, "untimed kernels (floors)": untimed,
                "launches (eager, host-bound GEMMs)": gpu - timed, "host (not hidden behind the GPU)": total - gpu}

    def _seconds(self, tokens: Any, seqs: Any, prefill_tokens: Any, context_tokens: Any, attention_pairs: Any,
                 sampled: Any, prefill_seqs: Any = None, prefill_pairs: Any = None) -> Any:
        if np.ndim(context_tokens) or np.ndim(tokens):  # a stretch of decode steps at once
            if not (np.ndim(tokens) or np.ndim(seqs) or np.ndim(sampled) or prefill_tokens or prefill_pairs
                    or np.any(np.asarray(attention_pairs) != np.asarray(context_tokens))):
                return self._decode_stretch_s(int(tokens), int(sampled), np.asarray(context_tokens, dtype=float))
            arrays = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in
                                           (tokens, seqs, prefill_tokens, context_tokens, attention_pairs, sampled)))
            return np.array([self._seconds(float(arrays[0][i]), float(arrays[1][i]), float(arrays[2][i]),
                                           float(arrays[3][i]), float(arrays[4][i]), float(arrays[5][i]),
                                           prefill_seqs=prefill_seqs, prefill_pairs=prefill_pairs)
                             for i in range(arrays[0].size)])
        tokens, seqs, prefill_tokens = int(tokens), int(seqs), int(prefill_tokens)
        if prefill_pairs is None:  # a caller without the split: chunks are what is not one-token decodes
            prefill_pairs = max(0.0, float(attention_pairs) - (float(context_tokens) if not prefill_tokens else 0.0))
        decode_seqs = max(0, tokens - prefill_tokens)
        p_seqs = float(prefill_seqs) if prefill_seqs is not None else (1.0 if prefill_tokens else 0.0)
        decode_context = max(0.0, float(attention_pairs) - float(prefill_pairs))
        gpu_ms = self._linear_ms(tokens, int(sampled)) + self._attention_ms(
            p_seqs, prefill_tokens, float(prefill_pairs), decode_seqs, decode_context
        )
        return self._with_host_s(self._beside_launches(gpu_ms, tokens, int(sampled)), seqs)

    def _beside_launches(self, gpu_ms: Any, tokens: int, sampled: int) -> Any:
        """An eager step's CPU launches its kernels while the GPU runs them: the forward pass takes
        the longer of the GPU's work and the GEMMs' host work (`_host_gemm_ms`; 0 in a graph step)."""
        if tokens <= self.captured_tokens:  # the hot path: every decode step
            return gpu_ms
        host = self._host_gemm_ms(tokens, sampled)
        return np.maximum(gpu_ms, host) if host > 0 else gpu_ms

    def _decode_stretch_s(self, n: int, sampled: int, contexts: np.ndarray) -> np.ndarray:
        """`step_s` of pure-decode steps of `n` requests holding `contexts` tokens: `step_s`'s
        arithmetic in the same order, on arrays, so each value equals the one-step call's."""
        attention = 0.0 + self._decode_attention_all_ms(n, contexts) if n > 0 else 0.0
        return self._with_host_s(self._beside_launches(self._linear_ms(n, sampled) + attention, n, sampled), n)

    @cached_property
    def untimed_kernels(self) -> int:
        """Kernels a step runs that no table times, each at least `kernel_floor_s` on the GPU: per
        layer two fused residual-add + RMSNorms, rotary and the KV-cache write (their bytes are in
        `_elementwise_ms`, but at decode their launch-bound floor is what they take), and per MoE
        layer the routing outside the fused-experts kernel (top-k selection, scores' bias and
        renormalization, the block-aligned sort of token ids, the combine)."""
        return UNTIMED_PER_LAYER * self.spec.num_layers + UNTIMED_PER_MOE_LAYER * self.moe_layers

    def host_sources(self) -> dict[str, str]:
        """Where the step's time outside the measured ops comes from."""
        cpu_ms, floor_us = self.coefficients.step_overhead_s * 1e3, self.coefficients.kernel_floor_s * 1e6
        return {
            "host": (
                f"the engine's CPU work per step, {cpu_ms:.2f} ms (fitted on the calibration runs), "
                + (
                    "beside the GPU's (async scheduling: a step takes the longer of the two)"
                    if self.overlaps_cpu
                    else "after the GPU's (sync scheduling: a step takes both)"
                )
            ),
            "untimed_kernels": (
                f"{self.untimed_kernels} kernels a step no table times ({UNTIMED_PER_LAYER} a layer: "
                f"add-norms, rotary, KV-cache write; {UNTIMED_PER_MOE_LAYER} a MoE layer: routing), "
                f"each at least {floor_us:g} us (kvplan's prior for a kernel's floor)"
            ),
        }

    def _with_host_s(self, gpu_ms: Any, seqs: float) -> Any:
        """The step in seconds: the GPU's work (the timed ops, the untimed kernels' floors, eager
        launches) and the engine's CPU cost per step (in turn, or beside it with async scheduling)."""
        c = self.coefficients
        gpu = gpu_ms / 1e3 + self.untimed_kernels * c.kernel_floor_s + (
            self.spec.num_layers * c.eager_layer_overhead_s if self.roofline.enforce_eager else 0.0)
        if self.roofline.legacy:
            return gpu + c.legacy_step_overhead_s + c.legacy_seq_overhead_s * seqs
        return host_step_s(gpu, c.step_overhead_s, self.overlaps_cpu)

    def __hash__(self) -> int:  # lru_cache on methods keys on the instance
        return id(self)

    @classmethod
    def build(
        cls,
        spec: ModelSpec,
        gpu: GpuSpec,
        *,
        tp: int = 1,
        pp: int = 1,
        dtype: str = "auto",
        quantization: str | None = None,
        kv_cache_dtype: str = "auto",
        vllm_version: str = oh.DEFAULT_VLLM_VERSION,
        enforce_eager: bool = False,
        coefficients: Coefficients | None = None,
        dp: int = 1,
        expert_parallel: bool = False,
        max_num_seqs: int | None = None,
        async_scheduling: bool | None = None,
    ) -> KernelStepModel:
        system, root = measured_system(gpu)
        roofline = GpuStepModel.build(
            spec,
            gpu,
            tp=tp,
            pp=pp,
            dtype=dtype,
            quantization=quantization,
            kv_cache_dtype=kv_cache_dtype,
            vllm_version=vllm_version,
            enforce_eager=enforce_eager,
            coefficients=coefficients or fitted_coefficients()[0],
            dp=dp,
        )
        tables = system_tables(system, str(root))
        sources: dict[str, str] = {}
        gemm_dtype, moe_dtype = kernel_dtypes(spec, quantization)
        kv_dtype = "fp8" if spec.kv_dtype(kv_cache_dtype).bits == 8 else "bfloat16"
        heads, kv_heads = spec.num_attention_heads // tp, max(1, spec.num_kv_heads // tp)
        captured = 0 if enforce_eager else oh.cudagraph_capture_tokens(max_num_seqs)  # --enforce-eager: none
        gemm = gemm_grid(tables, gemm_dtype, sources)
        plain_gemm = gemm_grid(tables, "bfloat16", {})
        if note := partly_kept_note(spec, quantization):
            sources["gemm"] = sources.get("gemm", "roofline") + f"; {note}"
        context, generation = (None, None) if spec.is_mla else attention_grids(tables, heads, kv_heads, spec.head_dim,
                                                                                kv_dtype, sources)
        group = tp * dp
        moe = moe_grid(tables, spec, moe_dtype, (1, group) if expert_parallel else (group, 1), sources)
        comms = collective_grids(tables, tp, dp if spec.moe_shape[0] else 1, sources)
        model = cls(spec, tp, roofline, gemm, context, generation, moe, comms.pop("allreduce"), sources,
                    peak_flops_per_s=compute_peak_flops(gpu, spec.quant.method),
                    bandwidth_bytes_per_s=float(gpu.memory_bandwidth_gbps or 0) * 1e9, dp=dp, plain_gemm=plain_gemm,
                    plain_tables=unquantized_tables(spec, quantization),
                    **comms, captured_tokens=captured, overlaps_cpu=(  # as the server runs; None: the version's default
                        oh.schedules_async_by_default(vllm_version) if async_scheduling is None else async_scheduling))
        annotate_sources(model, tables, group, STANDARD_ATTENTION, vllm_version)
        return model
