"""Per-step latency model: how long one engine step takes, from the shape of its batch.

Two models share one interface (`step_s(shape)`):
- `LinearCostModel`, calibrated on this machine by `kvplan calibrate` (timed engine steps, fitted
  with non-negative least squares): CPUs have no datasheet roofline worth trusting.
- `RooflineCostModel` for GPUs from a `GpuSpec`: a step is bound either by compute (prefill) or by
  reading the weights and the KV cache (decode), whichever is slower.
No model forward runs here; the scheduler simulation calls this once per simulated step.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from kvplan.errors import ConfigError


@dataclass(frozen=True)
class StepShape:
    """A scheduled batch reduced to the numbers its cost depends on."""

    num_tokens: int  # new tokens computed this step (prefill chunks + one per decode)
    num_seqs: int  # sequences in the batch
    context_tokens: int  # sum over sequences of the tokens attended to (cached + new)
    attention_pairs: int  # sum over sequences of new_tokens x context: the quadratic prefill term
    num_prefill_tokens: int = 0

    @classmethod
    def from_counts(cls, contexts_before: list[int], new_tokens: list[int]) -> StepShape:
        ctx = [c + n for c, n in zip(contexts_before, new_tokens)]
        return cls(num_tokens=sum(new_tokens), num_seqs=len(new_tokens), context_tokens=sum(ctx),
                   attention_pairs=sum(n * c for n, c in zip(new_tokens, ctx)),
                   num_prefill_tokens=sum(n for n in new_tokens if n > 1))

    def features(self) -> list[float]:
        return [float(self.num_tokens), float(self.num_seqs), float(self.context_tokens), float(self.attention_pairs)]


@dataclass(frozen=True)
class LinearCostModel:
    """step_s = intercept + Σ coefficient x feature (tokens, seqs, context_tokens, attention_pairs); fitted on timed steps."""

    intercept_s: float
    per_token_s: float
    per_seq_s: float
    per_context_token_s: float
    per_attention_pair_s: float
    model: str = ""
    device: str = "cpu"
    host: str = ""
    num_samples: int = 0
    r2: float = 0.0
    # fit quality beside R²: each step's (measured - fitted) / fitted, 10th and 90th percentile
    residual_p10_pct: Optional[float] = None
    residual_p90_pct: Optional[float] = None
    # what `kvplan calibrate` saw: the reference kernel's mean time, the engine's threads and the
    # machine (machine_facts.MachineFacts), so a run elsewhere is flagged and its slowdown measured
    reference_kernel_ms: Optional[float] = None
    reference_kernel_cpu_ms: Optional[float] = None
    cpu_wait_share: Optional[float] = None
    threads: Optional[int] = None
    machine: Optional[dict[str, Any]] = None

    def step_s(self, shape: StepShape) -> float:
        if shape.num_seqs == 0:
            return 0.0
        t, s, c, a = shape.features()
        return (self.intercept_s + self.per_token_s * t + self.per_seq_s * s + self.per_context_token_s * c
                + self.per_attention_pair_s * a)

    @classmethod
    def fit(cls, shapes: list[StepShape], seconds: list[float], **meta: object) -> LinearCostModel:
        """Non-negative least squares on relative errors: a negative cost per token would predict
        time travel."""
        import numpy as np

        x = np.array([[1.0, *s.features()] for s in shapes])
        y = np.array(seconds, dtype=float)
        scale = np.maximum(x.max(axis=0), 1e-12)  # conditioning: features span 1 .. 1e6
        # relative error: a 3 ms decode step matters as much as a 300 ms prefill (ITL percentiles
        # are made of small steps), so each row is divided by its own duration
        w = 1.0 / np.maximum(y, 1e-6)
        xs = x / scale * w[:, None]
        y_fit = y * w
        active = list(range(x.shape[1]))
        coef = np.zeros(x.shape[1])
        while active:  # drop negative coefficients one at a time, then refit
            sol, *_ = np.linalg.lstsq(xs[:, active], y_fit, rcond=None)
            if (sol >= 0).all():
                coef[:] = 0.0
                coef[active] = sol
                break
            active.pop(int(np.argmin(sol)))
        coef = coef / scale
        pred = x @ coef
        ss_res = float(((y - pred) ** 2).sum())
        ss_tot = float(((y - y.mean()) ** 2).sum()) or 1.0
        rel = 100.0 * (y - pred) / np.maximum(pred, 1e-9)
        return cls(*map(float, coef), num_samples=len(y), r2=1.0 - ss_res / ss_tot,  # type: ignore[arg-type]
                   residual_p10_pct=float(np.percentile(rel, 10)), residual_p90_pct=float(np.percentile(rel, 90)), **meta)

    def save(self, path: Path) -> None:
        import yaml

        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump({"kind": "linear", **asdict(self)}, sort_keys=False))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> LinearCostModel:
        import yaml

        try:
            data = yaml.safe_load(Path(path).read_text())
            data.pop("kind", None)
            return cls(**data)
        except FileNotFoundError:
            raise ConfigError(f"{path}: no calibration file; run `kvplan calibrate` first") from None
        except (TypeError, AttributeError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: not a kvplan calibration file ({exc})") from None


@dataclass(frozen=True)
class RooflineCostModel:
    """GPU step time from a datasheet: max(compute, memory traffic) / achievable fraction + overhead."""

    flops_per_token: float  # 2 x active parameters
    attention_flops_per_pair: float  # 4 x layers x heads x head_dim (QK^T and PV)
    weights_bytes: float  # read once per step
    kv_bytes_per_token: float  # read once per attended token per step (per GPU)
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    compute_efficiency: float = 0.5  # achievable MFU for dense GEMMs
    bandwidth_efficiency: float = 0.75  # achievable fraction of peak HBM bandwidth
    overhead_s: float = 0.004  # scheduling, sampling, kernel launches per step

    def step_s(self, shape: StepShape) -> float:
        if shape.num_seqs == 0:
            return 0.0
        flops = self.flops_per_token * shape.num_tokens + self.attention_flops_per_pair * shape.attention_pairs
        traffic = self.weights_bytes + self.kv_bytes_per_token * shape.context_tokens
        compute_s = flops / (self.peak_flops_per_s * self.compute_efficiency)
        memory_s = traffic / (self.bandwidth_bytes_per_s * self.bandwidth_efficiency)
        return max(compute_s, memory_s) + self.overhead_s


def roofline_for(spec: object, gpu: object, kv_bytes_per_token_per_gpu: int, tp: int = 1) -> RooflineCostModel:
    """A roofline model for `spec` (ModelSpec) on `gpu` (GpuSpec) with tensor parallelism `tp`."""
    from kvplan.errors import KvplanError

    peak = getattr(gpu, "bf16_dense_tflops", None)
    bw = getattr(gpu, "memory_bandwidth_gbps", None)
    if not peak or not bw:
        raise KvplanError(f"GPU {getattr(gpu, 'name', gpu)!r} lacks bf16 TFLOPS or bandwidth in the catalog; "
                          "a roofline needs both")
    heads_dim = spec.num_attention_heads * spec.head_dim  # type: ignore[attr-defined]
    return RooflineCostModel(
        flops_per_token=2.0 * spec.params.active / tp,  # type: ignore[attr-defined]
        attention_flops_per_pair=4.0 * spec.num_layers * heads_dim / tp,  # type: ignore[attr-defined]
        weights_bytes=spec.weights_bytes / tp,  # type: ignore[attr-defined]
        kv_bytes_per_token=float(kv_bytes_per_token_per_gpu),
        peak_flops_per_s=peak * 1e12, bandwidth_bytes_per_s=bw * 1e9,
    )
