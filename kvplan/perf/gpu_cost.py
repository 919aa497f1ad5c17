"""GPU step time from physics: bytes over HBM bandwidth, FLOPs over tensor throughput, all-reduce
over the interconnect, plus CPU overhead per step and per request.

    linear  = soft-max(weights read / (BW x hbm_eff), linear FLOPs / (peak(dtype) x gemm_eff))
    attn    = KV bytes read / (BW x kv_eff) + attention FLOPs / (peak(bf16) x attention_eff)
    comm    = 2 x layers x (allreduce_latency + activation bytes x 2(tp-1)/tp / (link BW x link_eff)),
              PCIe and NVLink each with their own latency and efficiency
    step    = linear + attn + comm (+ eager launches per layer) + step_overhead; before vLLM 0.6
              the output processing of the step's requests (legacy_seq_overhead x requests) adds
              up; from 0.6 it runs beside the next forward pass and is not modelled as a cost (no
              per-request floor: fitted, it set the step at high batch for every model alike).
              The roofline adds the CPU's step cost even under async scheduling: its efficiencies
              were fitted with it added (sync runs), so its GPU part alone is not a GPU time
              (tried with max(GPU, CPU) on AIConfigurator's rows: TPOT 13% -> 25% median). The
              measured-kernel backend overlaps them (`host_step_s`).

Weights read per step count the MoE experts that the step's tokens actually touch
(1 - (1 - k/E)^tokens of them). Every coefficient is global (`Coefficients`, fitted once on
published runs, `kvplan/data/perf/gpu_cost.yaml`); everything model- or GPU-specific comes from
the model's config and the GPU datasheet. Works on floats and on numpy arrays alike, so the fit
re-times whole traces at once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

import numpy as np

from kvplan.errors import KvplanError
from kvplan.perf.step_cost import StepShape
from kvplan.plan import overheads as oh
from kvplan.plan.kv import KvLayout
from kvplan.spec.gpu import GpuSpec
from kvplan.spec.model import ModelSpec
from kvplan.spec.quant import make_quant

LEGACY_BEFORE = (0, 6, 0)  # vLLM 0.6 rewrote the V0 hot path (async output, multi-step): CPU overhead dropped
ROOFLINE_SHARPNESS = 3.0  # p of the soft maximum (a^p + b^p)^(1/p) between memory and compute time
ACTIVATION_BYTES = 2  # bf16/fp16 hidden states: all-reduce payload, elementwise traffic
PCIE_GBPS_PER_DIRECTION = {3: 16.0, 4: 32.0, 5: 64.0, 6: 128.0}


@dataclass(frozen=True)
class Coefficients:
    """The global, physically meaningful efficiency factors (dimensionless) and overheads (s)."""

    hbm_efficiency: float = 0.8  # achieved fraction of HBM bandwidth reading weights
    gemm_efficiency: float = 0.6  # achieved fraction of dense tensor throughput in the linear layers
    kv_efficiency: float = 0.6  # achieved fraction of HBM bandwidth reading the paged KV cache
    attention_efficiency: float = 0.4  # achieved fraction of bf16 tensor throughput in prefill attention
    allreduce_latency_s: float = 20e-6  # fixed cost of one all-reduce (two per layer) over PCIe
    link_efficiency: float = 0.7  # achieved fraction of PCIe's per-direction bandwidth in all-reduce
    # NVLink (and Infinity Fabric) all-reduce: no TP>1 NVLink run in the calibration file, so these
    # stay datasheet-style priors (custom all-reduce ~15 us; NCCL bus bandwidth ~70% of the link)
    nvlink_allreduce_latency_s: float = 15e-6
    nvlink_efficiency: float = 0.7
    step_overhead_s: float = 2e-3  # CPU per engine step: scheduling, input prep, sampling, graph launch
    legacy_step_overhead_s: float = 4e-3  # the same before vLLM 0.6
    legacy_seq_overhead_s: float = 60e-6
    eager_layer_overhead_s: float = 40e-6  # kernel launches per layer per step without CUDA graphs
    # the shortest a small kernel takes on the GPU, even replayed from a CUDA graph (launch, ramp,
    # drain: ~2-3 us on Hopper/Blackwell); the measured-kernel backend adds it for each kernel vLLM
    # runs that its tables do not time (norms, rotary, KV-cache writes, MoE routing)
    kernel_floor_s: float = 2.5e-6
    request_latency_s: float = 0.02  # per request outside engine steps: HTTP, tokenization, streaming back
    frontend_request_s: float = 0.0  # the API server's serial work per request before the engine sees it

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


@lru_cache(maxsize=1)
def fitted_coefficients() -> tuple[Coefficients, dict[str, Any]]:
    """The coefficients stored by `benchmarks/gpu_accuracy.py --refit`, with the fit's metadata."""
    import yaml

    from kvplan.spec.catalog_files import bundled_dir

    path = bundled_dir() / "perf" / "gpu_cost.yaml"
    data = yaml.safe_load(path.read_text())
    return Coefficients(**data["coefficients"]), {k: v for k, v in data.items() if k != "coefficients"}


def has_nvlink(gpu: GpuSpec) -> bool:
    return bool(re.search(r"(?:NVLink[^:;]*?|Infinity Fabric)\s*:?\s*([\d.]+)\s*(TB|GB)/s", gpu.interconnect or ""))


def link_bytes_per_s(gpu: GpuSpec) -> float:
    """Per-direction GPU-to-GPU bandwidth from the catalog's interconnect text (NVLink or PCIe)."""
    text = gpu.interconnect or ""
    m = re.search(r"(?:NVLink[^:;]*?|Infinity Fabric)\s*:?\s*([\d.]+)\s*(TB|GB)/s", text)
    if m:
        total = float(m.group(1)) * (1000.0 if m.group(2) == "TB" else 1.0)
        return total / 2 * 1e9  # datasheets quote both directions together
    m = re.search(r"(?:PCIe\s*(?:Gen\s*)?|PCIe\s)(\d)", text)
    gen = int(m.group(1)) if m else 4
    return PCIE_GBPS_PER_DIRECTION.get(gen, 32.0) * 1e9


def compute_peak_flops(gpu: GpuSpec, quant_method: str) -> float:
    """Dense tensor throughput of the GEMMs: fp8 and int8 activations run on their own units;
    weight-only formats (w4a16, GPTQ, AWQ, MXFP4 on pre-Blackwell) dequantize to bf16."""
    bf16 = gpu.bf16_dense_tflops or gpu.fp16_dense_tflops  # no bf16 (T4, V100): vLLM runs float16
    if not bf16 or not gpu.memory_bandwidth_gbps:
        raise KvplanError(f"GPU {gpu.name!r} has no bf16 or fp16 TFLOPS or no memory bandwidth in the catalog "
                          "(kvplan/data/gpus.yaml); a time prediction needs both; `kvplan estimate` plans its memory")
    if quant_method == "fp8" and gpu.fp8_dense_tflops:
        return gpu.fp8_dense_tflops * 1e12
    if quant_method == "int8" and gpu.int8_dense_tops:
        return gpu.int8_dense_tops * 1e12
    return bf16 * 1e12


@dataclass(frozen=True)
class GpuStepModel:
    """One engine step's time on one GPU of a TP group, for one model and serving configuration."""

    dense_read_bytes: float  # non-expert weights read every step, per GPU (LM head included, embedding rows not)
    expert_bytes: float  # all routed experts, per GPU
    experts: int
    experts_per_token: int
    linear_flops_per_token: float  # per GPU
    lm_head_flops_per_row: float  # per GPU, per sampled request
    kv_bytes_per_token: float  # per GPU, all layers of the stage
    attention_flops_per_pair: float  # per GPU
    peak_flops_per_s: float  # GEMM dtype's dense throughput
    attention_peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    link_bytes_per_s: float
    nvlink: bool
    allreduce_bytes_per_token: float  # both all-reduces of all layers, ring traffic per GPU
    num_allreduces: int
    num_layers: int
    legacy: bool
    enforce_eager: bool
    coefficients: Coefficients
    # --data-parallel-size: this GPU's replica steps with `dp` others whose tokens meet in every MoE
    # layer (experts spread over dp x tp GPUs); the MoE layers then reduce over that whole group
    dp: int = 1
    num_moe_layers: int = 0
    moe_comm_bytes_per_token: float = 0.0  # per MoE layer and token of the group, ring traffic per GPU

    def step_s(self, shape: StepShape) -> Any:
        return sum(self._parts(shape.num_tokens, shape.num_seqs, shape.context_tokens, shape.attention_pairs,
                               shape.sampled))

    def components_s(self, shape: StepShape) -> dict[str, float]:
        parts = self._parts(shape.num_tokens, shape.num_seqs, shape.context_tokens, shape.attention_pairs,
                            shape.sampled)
        return {name: float(v) for name, v in zip(("linear", "attention", "communication", "launches", "host"), parts)}

    def _parts(self, tokens: Any, seqs: Any, context_tokens: Any, attention_pairs: Any,
               sampled: Any) -> tuple[Any, Any, Any, Any, Any]:
        """(linear layers, attention, TP/MoE communication, eager launches, host) seconds of a step."""
        c = self.coefficients
        touched: Any = 1.0
        if self.experts:  # the MoE group's tokens (dp replicas' batches) pick which local experts are read
            touched = 1.0 - (1.0 - self.experts_per_token / self.experts) ** (np.asarray(tokens, dtype=float) * self.dp)
        read = self.dense_read_bytes + self.expert_bytes * touched
        mem = read / (self.bandwidth_bytes_per_s * c.hbm_efficiency)
        flops = self.linear_flops_per_token * tokens + self.lm_head_flops_per_row * sampled
        gemm = flops / (self.peak_flops_per_s * c.gemm_efficiency)
        p = ROOFLINE_SHARPNESS
        linear = (mem ** p + gemm ** p) ** (1.0 / p)
        attn = context_tokens * self.kv_bytes_per_token / (
            self.bandwidth_bytes_per_s * c.kv_efficiency
        ) + attention_pairs * self.attention_flops_per_pair / (self.attention_peak_flops_per_s * c.attention_efficiency)
        comm: Any = 0.0
        if self.num_allreduces:
            latency, efficiency = ((c.nvlink_allreduce_latency_s, c.nvlink_efficiency) if self.nvlink
                                   else (c.allreduce_latency_s, c.link_efficiency))
            comm = self.num_allreduces * latency + tokens * self.allreduce_bytes_per_token / (
                self.link_bytes_per_s * efficiency
            )
        if self.moe_comm_bytes_per_token:
            latency, efficiency = ((c.nvlink_allreduce_latency_s, c.nvlink_efficiency) if self.nvlink
                                   else (c.allreduce_latency_s, c.link_efficiency))
            comm = comm + self.num_moe_layers * latency + (
                tokens * self.dp * self.moe_comm_bytes_per_token / (self.link_bytes_per_s * efficiency))
        launches = self.num_layers * c.eager_layer_overhead_s if self.enforce_eager else 0.0
        if self.legacy:  # one process did everything in turn: scheduling, the forward pass, output handling
            host = c.legacy_step_overhead_s + c.legacy_seq_overhead_s * seqs
        else:
            # 0.6+: output processing (detokenizing, streaming each request's token) runs beside the next
            # forward pass (async output processing, then V1's separate API-server process)
            host = c.step_overhead_s
        return linear, attn, comm, launches, host

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
    ) -> GpuStepModel:
        """Pipeline stages run one after another for one batch, so a step costs the whole model's
        layers on one stage's GPUs (pp adds memory, not speed, in this model)."""
        coefficients = coefficients or fitted_coefficients()[0]
        dbytes = oh.MODEL_DTYPE_BYTES[spec.served_dtype(dtype)]
        p = spec.params
        asked = quantization and quantization != "none" and spec.quant.method == "none"
        quant = make_quant(quantization) if asked and quantization else spec.quant
        total = oh.model_weights_bytes(spec, dtype, quantization)
        head = (p.lm_head or p.embedding) * dbytes  # tied embeddings: the LM head reads the embedding matrix
        layers_bytes = max(0.0, total - (p.embedding + p.lm_head) * dbytes)
        n_experts, k, _, _ = spec.moe_shape
        expert_bytes = float(oh.expert_weights_bytes(spec, dtype, quantization))
        group = tp * dp  # GPUs the experts are spread over
        n_moe = moe_layer_count(spec) if expert_bytes else 0
        dense = max(0.0, layers_bytes - expert_bytes) + head
        kv = KvLayout.of(spec, kv_cache_dtype, 16, tp).bytes_per_token_per_gpu()
        heads = spec.num_attention_heads
        attn_layers = sum(1 for ln in spec.layers if ln.attends)
        allreduces = (2 * spec.num_layers - (n_moe if dp > 1 else 0)) if tp > 1 else 0
        # QK^T and PV: 2 FLOPs per multiply-add each; MLA attends in the 576-wide latent (512 for PV)
        per_head = (576 + 512) if spec.is_mla else 2 * spec.head_dim
        return cls(
            dense_read_bytes=dense / tp,
            expert_bytes=expert_bytes / group,
            experts=n_experts if expert_bytes else 0,
            experts_per_token=k,
            linear_flops_per_token=2.0 * (p.attention + p.mixer + p.mlp_dense + p.experts_active) / tp,
            lm_head_flops_per_row=2.0 * spec.vocab_size * spec.hidden_size / tp,
            kv_bytes_per_token=float(kv),
            attention_flops_per_pair=2.0 * attn_layers * heads * per_head / tp,
            peak_flops_per_s=compute_peak_flops(gpu, quant.method),
            attention_peak_flops_per_s=compute_peak_flops(gpu, "none"),
            bandwidth_bytes_per_s=float(gpu.memory_bandwidth_gbps or 0) * 1e9,
            link_bytes_per_s=link_bytes_per_s(gpu),
            nvlink=has_nvlink(gpu),
            # two all-reduces a layer over TP (with dp > 1 a MoE layer's second one spans the whole
            # group), and a norm's statistics where a family spreads one over the TP group (latency only)
            allreduce_bytes_per_token=allreduces * spec.hidden_size * ACTIVATION_BYTES * 2 * (tp - 1) / tp,
            num_allreduces=(allreduces + spec.tp_norm_allreduces) if tp > 1 else 0,
            num_layers=spec.num_layers,
            legacy=oh.parse_vllm_version(vllm_version) < LEGACY_BEFORE,
            enforce_eager=enforce_eager,
            coefficients=coefficients,
            dp=dp,
            num_moe_layers=n_moe if dp > 1 else 0,
            moe_comm_bytes_per_token=(n_moe * spec.hidden_size * ACTIVATION_BYTES * 2 * (group - 1) / group)
            if dp > 1 and group > 1
            else 0.0,
        )


def host_step_s(gpu_s: Any, cpu_s: float, overlapped: bool) -> Any:
    """A step's wall time from its GPU work and the engine's CPU work per step: in turn, or, with
    async scheduling, side by side (the CPU schedules and prepares step N+1 while the GPU runs
    step N, so the slower of the two sets the pace)."""
    return np.maximum(gpu_s, cpu_s) if overlapped else gpu_s + cpu_s


def moe_layer_count(spec: ModelSpec) -> int:
    """Decoder layers with routed experts (the rest are dense MLPs), from the parameter split."""
    n_exp, _, inter, _ = spec.moe_shape
    per_layer = n_exp * 3 * spec.hidden_size * inter
    return min(spec.num_layers, round(spec.params.experts / per_layer)) if per_layer else 0
