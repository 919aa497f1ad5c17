"""The CPU step cost: `LinearCostModel`, calibrated on this machine by `kvplan calibrate` (timed
engine steps, fitted with non-negative least squares): CPUs have no datasheet roofline worth
trusting. It is one `StepCost` (`kvplan.perf.step_cost`); on a GPU the same interface is the
physical model of `kvplan.perf.gpu_cost`, the one `predict` and `plan` use.
No model forward runs here; the scheduler simulation calls this once per simulated step.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kvplan.errors import ConfigError
from kvplan.perf.step_cost import StepShape


@dataclass(frozen=True)
class LinearCostModel:
    """step_s = intercept + Σ coefficient x feature (tokens, seqs, context_tokens, attention_pairs);
    fitted on timed steps."""

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
    residual_p10_pct: float | None = None
    residual_p90_pct: float | None = None
    # what `kvplan calibrate` saw: the reference kernel's mean time, the engine's threads and the
    # machine (machine_facts.MachineFacts), so a run elsewhere is flagged and its slowdown measured
    reference_kernel_ms: float | None = None
    reference_kernel_cpu_ms: float | None = None
    cpu_wait_share: float | None = None
    threads: int | None = None
    machine: dict[str, Any] | None = None

    def step_s(self, shape: StepShape) -> float:
        if shape.num_seqs == 0:
            return 0.0
        t, s, c, a = shape.features()
        return (self.intercept_s + self.per_token_s * t + self.per_seq_s * s + self.per_context_token_s * c
                + self.per_attention_pair_s * a)

    def components_s(self, shape: StepShape) -> dict[str, float]:
        """The fitted terms: intercept, per token, per sequence, per context token, per attention pair."""
        if shape.num_seqs == 0:
            return dict.fromkeys(("intercept", "tokens", "seqs", "context", "attention"), 0.0)
        t, s, c, a = shape.features()
        return {"intercept": self.intercept_s, "tokens": self.per_token_s * t, "seqs": self.per_seq_s * s,
                "context": self.per_context_token_s * c, "attention": self.per_attention_pair_s * a}

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
        fields: dict[str, Any] = dict(zip(_COEFFICIENTS, map(float, coef), strict=True))
        fields |= {
            "num_samples": len(y),
            "r2": 1.0 - ss_res / ss_tot,
            "residual_p10_pct": float(np.percentile(rel, 10)),
            "residual_p90_pct": float(np.percentile(rel, 90)),
        }
        return cls(**fields, **meta)  # type: ignore[arg-type]

    def save(self, path: Path) -> None:
        import yaml

        from kvplan.files import write_text_atomic

        write_text_atomic(path, yaml.safe_dump({"kind": "linear", **asdict(self)}, sort_keys=False))

    @classmethod
    def load(cls, path: Path) -> LinearCostModel:
        """Read a calibration file: a mapping of this class's fields, the coefficients finite and
        >= 0 (a NaN intercept would make every predicted latency NaN)."""
        import yaml

        from kvplan.errors import read_user_file
        from kvplan.stress.scenario_loader import load_yaml

        if not Path(path).exists():
            raise ConfigError(f"{path}: no calibration file; run `kvplan calibrate` first")
        text = read_user_file(path, "calibration", max_bytes=2**20)
        try:
            data = load_yaml(text)
        except (yaml.YAMLError, RecursionError) as exc:
            raise ConfigError(f"{path}: not a kvplan calibration file (invalid YAML: {type(exc).__name__})") from None
        return cls(**_checked_fields(data, path))


_COEFFICIENTS = ("intercept_s", "per_token_s", "per_seq_s", "per_context_token_s", "per_attention_pair_s")


def _calibration_schema() -> Any:
    """The pydantic schema of a calibration file (built on first use: `estimate` never loads one)."""
    from typing import Annotated, Literal

    from pydantic import BaseModel, ConfigDict, Field

    strict = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    seconds = Annotated[float, Field(ge=0, le=3600)]  # per step: a NaN or negative cost would poison every prediction
    text = Annotated[str, Field(max_length=500)]

    class Machine(BaseModel):
        model_config = strict
        cpu_model: text | None = None
        cores: Annotated[int, Field(ge=1, le=2 ** 20)] | None = None
        torch: text | None = None
        host: text | None = None

    class CalibrationFile(BaseModel):
        model_config = strict
        kind: Literal["linear"] = "linear"
        intercept_s: seconds
        per_token_s: seconds
        per_seq_s: seconds
        per_context_token_s: seconds
        per_attention_pair_s: seconds
        model: text = ""
        device: text = "cpu"
        host: text = ""
        num_samples: Annotated[int, Field(ge=0, le=2**53)] = 0
        r2: Annotated[float, Field(ge=-1e9, le=1)] = 0.0
        residual_p10_pct: Annotated[float, Field(ge=-1000000000.0, le=1000000000.0)] | None = None
        residual_p90_pct: Annotated[float, Field(ge=-1000000000.0, le=1000000000.0)] | None = None
        reference_kernel_ms: Annotated[float, Field(gt=0, le=1000000000.0)] | None = None  # a slowdown divides by it
        reference_kernel_cpu_ms: Annotated[float, Field(gt=0, le=1000000000.0)] | None = None
        cpu_wait_share: Annotated[float, Field(ge=0, le=1)] | None = None
        threads: Annotated[int, Field(ge=1, le=2 ** 16)] | None = None
        machine: Machine | None = None

    return CalibrationFile


def _checked_fields(data: object, path: Path) -> dict[str, Any]:
    """The fields of a calibration mapping, each of the type and range `LinearCostModel` needs
    (integral numbers are accepted where a float is meant: YAML writes 0.0 as 0.0 but users write 0)."""
    from pydantic import ValidationError

    from kvplan.validation import format_validation_error

    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a kvplan calibration file (a mapping of {', '.join(_COEFFICIENTS)}, ...)")
    schema = _calibration_schema()
    floats = {k for k, f in schema.model_fields.items() if "float" in str(f.annotation)}
    data = {k: float(v) if k in floats and type(v) is int and abs(v) <= 2**53 else v for k, v in data.items()}
    try:
        checked = schema.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(str(path), exc, schema)) from None
    fields = checked.model_dump(exclude={"kind"})
    if checked.machine is not None:
        fields["machine"] = checked.machine.model_dump(exclude_unset=True)
    return fields
