"""Scenario files: the schema of a scenario YAML (bundled ones in `scenarios/`).

Every mistake becomes one `KvplanError` line: the file, the field path as the user wrote it
(`workload.classes[1].prompt_tokens.mean`), the bad value and, where there are choices, the
choices. YAML syntax errors give the line and column. Checks that need the model (lengths that
cannot fit `max_model_len`, a pool smaller than one request) run after the schema, in
`check_against_model`.

Conventions (documented in docs/metrics.md and the scenario files):
- A length is an int (fixed) or `{dist, mean, std, min, max}`; lognormal's mean/std are those of
  the token count itself, not of its logarithm. Draws are rounded and clipped to [min, max].
- `prompt_tokens` counts the whole prompt, shared prefix included.
- Prediction tolerances live in `gate.prediction` (symmetric percents), next to the baseline
  tolerances in `gate.relative` (signed: "+15%" may grow 15%, "-20%" may drop 20%, "15%" either).
"""
from __future__ import annotations

import difflib
import functools
import math
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from kvplan.engine.config import EngineConfig, engine_config_from
from kvplan.errors import KvplanError
from kvplan.plan.kv import blocks_in_budget, bytes_per_block
from kvplan.spec.dtypes import resolve_kv_dtype
from kvplan.spec.profiles import load_model, model_config
from kvplan.stress.figures import RENAMED_FIGURES, metric_names, names
from kvplan.stress.overrides import check_overrides
from kvplan.validation import FieldIssue, first_error
from kvplan.validation import short_repr as _short

# Bounds that keep a scenario's cost finite: a typo such as 1e-300 req/s or 2**64 requests is an
# error naming the limit, not a run that never ends or eats the machine's memory.
MAX_REQUESTS = 1_000_000
MAX_DURATION_S = 7 * 86_400.0
MIN_RATE_PER_S, MAX_RATE_PER_S = 1e-3, 1e6
MAX_TOKENS = 10_000_000
SPECIAL_TOKEN_IDS = 3  # ids 0..2 (pad/bos/eos in the tiny models) never appear in prompts


class _Strict(BaseModel):
    # strict: YAML `"5"` is not silently an int, and `true` is not 1
    # no inf/nan: `.inf` in YAML is a float, and an infinite ramp or duration never ends
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


# --- model ------------------------------------------------------------------------------------
class ModelRef(_Strict):
    name: str = Field(
        min_length=1, max_length=4096
    )  # bundled profile, alias, HF id, config.json path or model directory
    overrides: dict[str, Any] = Field(default_factory=dict, max_length=64)  # config.json keys, merged over the base


# --- workload ---------------------------------------------------------------------------------
class LengthSpec(_Strict):
    """Tokens per request: fixed, uniform [min, max], normal or lognormal (mean, std), clipped."""

    dist: Literal["fixed", "uniform", "normal", "lognormal"] = "fixed"
    mean: float | None = Field(None, gt=0, le=MAX_TOKENS)
    std: float | None = Field(None, gt=0, le=MAX_TOKENS)
    min: int | None = Field(None, gt=0, le=MAX_TOKENS)
    max: int | None = Field(None, gt=0, le=MAX_TOKENS)

    @model_validator(mode="before")
    @classmethod
    def _from_number(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise FieldIssue((), f"must be a token count or a mapping {{dist, mean, std, min, max}}, got {v!r}")
        if isinstance(v, (int, float)):
            if not (isinstance(v, int) or (math.isfinite(v) and v.is_integer())) or not 0 < v <= MAX_TOKENS:
                raise FieldIssue((), f"must be a whole number of tokens in 1..{MAX_TOKENS:,}, got {_short(v)}")
            return {"dist": "fixed", "mean": int(v)}
        if not isinstance(v, (dict, LengthSpec)):
            raise FieldIssue((), f"must be a token count or a mapping {{dist, mean, std, min, max}}, got {_short(v)}")
        return v

    @model_validator(mode="after")
    def _check(self) -> LengthSpec:
        need = {"fixed": ("mean",), "uniform": ("min", "max"), "normal": ("mean", "std"), "lognormal": ("mean", "std")}[
            self.dist
        ]
        unused = {"fixed": ("std", "min", "max"), "uniform": ("mean", "std")}.get(self.dist, ())
        for key in need:
            if getattr(self, key) is None:
                raise FieldIssue((key,), f"is required for dist {self.dist}")
        for key in unused:
            if getattr(self, key) is not None:
                raise FieldIssue((key,), f"has no effect for dist {self.dist} (got {getattr(self, key)!r}); remove it")
        if self.dist == "fixed" and self.mean != int(self.mean):
            raise FieldIssue(("mean",), f"must be a whole number of tokens for dist fixed, got {self.mean!r}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise FieldIssue(("min",), f"min {self.min} is larger than max {self.max}")
        if self.mean is not None and self.dist != "fixed":
            if (self.min is not None and self.mean < self.min) or (self.max is not None and self.mean > self.max):
                raise FieldIssue(("mean",), f"mean {self.mean:g} is outside [min {self.min}, max {self.max}]")
        return self

    @property
    def lower_tokens(self) -> int:
        """The smallest length a draw can have (before the shared-prefix floor)."""
        return int(self.mean) if self.dist == "fixed" else (self.min or 1)

    @property
    def upper_tokens(self) -> int | None:
        return int(self.mean) if self.dist == "fixed" else self.max


class SharedPrefix(_Strict):
    id: str = Field(min_length=1, max_length=200)  # one id names one prefix: same id, same token ids
    tokens: int = Field(gt=0, le=MAX_TOKENS)


class RequestClass(_Strict):
    name: str = Field(min_length=1, max_length=200)
    weight: float = Field(1.0, ge=0, le=1e9)
    prompt_tokens: LengthSpec
    output_tokens: LengthSpec
    shared_prefix: SharedPrefix | None = None

    @model_validator(mode="after")
    def _prefix_fits(self) -> RequestClass:
        upper = self.prompt_tokens.upper_tokens
        if self.shared_prefix is not None and upper is not None and upper <= self.shared_prefix.tokens:
            raise FieldIssue(
                ("shared_prefix", "tokens"),
                f"{self.shared_prefix.tokens} leaves no room in prompts of at most "
                f"{upper} tokens (prompt_tokens counts the prefix)",
            )
        return self


DATASET_NAMES = ("sharegpt", "custom", "burstgpt")


class DatasetRef(_Strict):
    """A file of real requests to replay, named as `vllm bench serve --dataset-name` names them
    (`dataset.py` reads them): sharegpt (ShareGPT JSON: the first human turn is the prompt, the
    reply's length the output), custom (JSONL or CSV rows with `prompt` text or `input_len`, and
    optionally `output_len`), burstgpt (BurstGPT's CSV of request and response token counts)."""

    name: Literal["sharegpt", "custom", "burstgpt"]
    path: str = Field(min_length=1, max_length=4096)  # relative paths: from the scenario file's folder
    output_tokens: int | None = Field(None, gt=0, le=MAX_TOKENS)  # --sharegpt-output-len / --custom-output-len
    tokenizer: str | None = Field(None, min_length=1, max_length=4096)  # counts text prompts (else ~4 bytes a token)


class Workload(_Strict):
    classes: list[RequestClass] | None = Field(None, min_length=1, max_length=256)
    dataset: DatasetRef | None = None

    @model_validator(mode="after")
    def _check(self) -> Workload:
        if (self.classes is None) == (self.dataset is None):
            raise FieldIssue(("classes",), "give exactly one of workload.classes (lengths drawn from distributions) or "
                             f"workload.dataset (a file of requests: {', '.join(DATASET_NAMES)}); "
                             f"{'both' if self.classes else 'neither'} given")
        if self.dataset is not None:
            return self
        if sum(c.weight for c in self.classes) <= 0:
            raise FieldIssue(("classes",), "class weights sum to 0; give at least one class a positive weight")
        seen: dict[str, int] = {}
        prefixes: dict[str, int] = {}
        for i, c in enumerate(self.classes):
            if c.name in seen:
                raise FieldIssue(
                    ("classes", i, "name"), f"duplicate class name {c.name!r} (also classes[{seen[c.name]}])"
                )
            seen[c.name] = i
            if c.shared_prefix is not None:
                first = prefixes.setdefault(c.shared_prefix.id, c.shared_prefix.tokens)
                if first != c.shared_prefix.tokens:
                    raise FieldIssue(("classes", i, "shared_prefix", "tokens"), f"prefix {c.shared_prefix.id!r} has "
                                     f"{c.shared_prefix.tokens} tokens here but {first} in another class")
        return self


# --- arrivals, SLO, gate ----------------------------------------------------------------------
class Arrival(_Strict):
    type: Literal["poisson", "constant", "concurrency"]
    rate_per_s: float | None = Field(None, ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)
    burstiness: float | None = Field(
        None, ge=1e-3, le=1e3
    )  # poisson only: gamma shape (default 1 = Poisson); < 1 burstier
    concurrency: int | None = Field(None, gt=0, le=MAX_REQUESTS)
    # open loop only: at most this many requests in flight; a due request waits for a slot, and its
    # TTFT counts from when it is sent (vllm bench serve --max-concurrency with a --request-rate)
    max_concurrency: int | None = Field(None, gt=0, le=MAX_REQUESTS)
    ramp_s: float = Field(0.0, ge=0, le=MAX_DURATION_S)  # rate (or concurrency) grows linearly from 0 over ramp_s

    @model_validator(mode="after")
    def _check(self) -> Arrival:
        if self.type == "concurrency":
            if self.concurrency is None:
                raise FieldIssue(("concurrency",), "is required for arrival type concurrency")
            if self.rate_per_s is not None:
                raise FieldIssue(
                    ("rate_per_s",), f"has no effect for closed-loop arrival type concurrency (got {self.rate_per_s!r})"
                )
            if self.max_concurrency is not None:
                raise FieldIssue(("max_concurrency",), "applies to open-loop arrivals; a closed loop's `concurrency` "
                                 "already caps requests in flight")
        else:
            if self.rate_per_s is None:
                raise FieldIssue(("rate_per_s",), f"is required for arrival type {self.type}")
            if self.concurrency is not None:
                raise FieldIssue(
                    ("concurrency",), f"has no effect for arrival type {self.type} (got {self.concurrency!r})"
                )
        if self.burstiness is not None and self.type != "poisson":
            raise FieldIssue(("burstiness",), f"only applies to arrival type poisson, not {self.type}")
        return self


    @property
    def gamma_shape(self) -> float:
        """Gamma shape of the inter-arrival gaps (1.0 unless `burstiness` is given)."""
        return self.burstiness if self.burstiness is not None else 1.0


class Slo(_Strict):
    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    itl_ms: float | None = Field(None, gt=0)  # per request: the `percentile` of its own token gaps
    e2e_ms: float | None = Field(None, gt=0)
    percentile: float = Field(99.0, gt=0, le=100)

    @property
    def limits_ms(self) -> dict[str, float]:
        return {
            k: v
            for k, v in (("ttft", self.ttft_ms), ("tpot", self.tpot_ms), ("itl", self.itl_ms), ("e2e", self.e2e_ms))
            if v is not None
        }


_PERCENT_RE = re.compile(r"^\s*(\+|-|±|\+/-)?\s*(\d+(?:\.\d+)?)\s*%\s*$")


class Tolerance(BaseModel):
    """'+15%': may grow by 15% (higher is worse); '-20%': may drop by 20%; '15%' or '±15%': either."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    percent: float = Field(ge=0)
    direction: Literal["up", "down", "both"]

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return v
        m = _PERCENT_RE.match(v) if isinstance(v, str) else None
        if not m:
            raise FieldIssue((), f"must be a percent string such as '+15%', '-20%' or '2%', got {_short(v)}")
        return {"percent": float(m.group(2)), "direction": {"+": "up", "-": "down"}.get(m.group(1) or "", "both")}

    @model_serializer
    def _text(self) -> str:
        return self.text

    @property
    def text(self) -> str:
        return f"{ {'up': '+', 'down': '-', 'both': ''}[self.direction]}{self.percent:g}%"

    def allows(self, reference: float, value: float) -> bool:
        """Whether `value` is within this tolerance of `reference` (a baseline or a prediction)."""
        slack = abs(reference) * self.percent / 100.0
        if self.direction == "up":
            return value <= reference + slack
        if self.direction == "down":
            return value >= reference - slack
        return abs(value - reference) <= slack


@functools.cache
def _gate_keys() -> tuple[str, ...]:
    return tuple(sorted({*metric_names(), *names("memory"), *names("machine"), *names("normalized")}))


def known_gate_keys() -> list[str]:
    """Every figure a gate may name (the registry is fixed: computed once, checked per key)."""
    return list(_gate_keys())


def _check_gate_key(where: tuple[str | int, ...], key: str) -> None:
    if key not in _gate_keys():
        known = known_gate_keys()
        close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
        hint = (
            f"did you mean: {', '.join(close)}?"
            if close
            else f"choices include: {', '.join(names('memory'))}, p99_itl_ms, mean_ttft_ms, ..."
        )
        raise FieldIssue(where, f"unknown metric {_short(key)}; {hint}")


class Gate(_Strict):
    exact: list[str] = Field(default_factory=list)  # must equal the baseline exactly (deterministic figures)
    relative: dict[str, Tolerance] = Field(default_factory=dict)  # vs the baseline
    prediction: dict[str, Tolerance] = Field(default_factory=dict)  # measured vs predicted, symmetric

    @field_validator("exact", mode="before")
    @classmethod
    def _renamed_exact(cls, v: Any) -> Any:
        """Scenarios (and results' copies of them) written before a figure's rename gate its new name."""
        return [RENAMED_FIGURES.get(k, k) if isinstance(k, str) else k for k in v] if isinstance(v, list) else v

    @field_validator("relative", "prediction", mode="before")
    @classmethod
    def _renamed(cls, v: Any) -> Any:
        return (
            {RENAMED_FIGURES.get(k, k) if isinstance(k, str) else k: t for k, t in v.items()}
            if isinstance(v, dict)
            else v
        )

    @model_validator(mode="after")
    def _check(self) -> Gate:
        for i, key in enumerate(self.exact):
            _check_gate_key(("exact", i), key)
        for key in self.relative:
            _check_gate_key(("relative", key), key)
        for key, tol in self.prediction.items():
            _check_gate_key(("prediction", key), key)
            if tol.direction != "both":
                raise FieldIssue(
                    ("prediction", key),
                    f"prediction tolerances are symmetric: write '{tol.percent:g}%', not {tol.text!r}",
                )
        return self


# --- the scenario -----------------------------------------------------------------------------
class Scenario(_Strict):
    # a file-name-safe name: it names the output folder and the calibration file
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str = Field("", max_length=10_000)
    model: ModelRef
    engine: EngineConfig = Field(default_factory=EngineConfig)
    workload: Workload
    arrival: Arrival
    num_requests: int | None = Field(None, gt=0, le=MAX_REQUESTS)
    duration_s: float | None = Field(None, gt=0, le=MAX_DURATION_S)
    warmup_requests: int = Field(0, ge=0, le=MAX_REQUESTS)
    max_error_rate: float = Field(0.0, ge=0, le=1)  # more errored requests than this fraction: the run failed (exit 1)
    seed: int = Field(0, ge=0, lt=2**63)
    slo: Slo = Field(default_factory=Slo)
    gate: Gate = Field(default_factory=Gate)

    _spec: Any = PrivateAttr(default=None)

    @field_validator("model", mode="before")
    @classmethod
    def _model_name(cls, v: Any) -> Any:
        return {"name": v} if isinstance(v, str) else v

    @field_validator("engine", mode="before")
    @classmethod
    def _engine(cls, v: Any) -> Any:
        """A YAML mapping becomes an `EngineConfig` by the config's own (strict) rules."""
        if isinstance(v, EngineConfig):
            return v
        if not isinstance(v, dict):
            raise FieldIssue((), f"must be a mapping of engine settings, got {_short(v)}")
        try:
            return engine_config_from(v)
        except ValidationError as exc:
            raise FieldIssue(*first_error(exc, EngineConfig)) from None

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        if (self.num_requests is None) == (self.duration_s is None):
            given = "both" if self.num_requests is not None else "neither"
            raise FieldIssue(("num_requests",), f"give exactly one of num_requests or duration_s ({given} given)")
        if self.num_requests is not None and self.warmup_requests >= self.num_requests:
            raise FieldIssue(
                ("warmup_requests",), f"{self.warmup_requests} must be less than num_requests {self.num_requests}"
            )
        return self

    # --- resolved views -------------------------------------------------------------------------
    def model_spec(self) -> Any:
        """The `ModelSpec` (with overrides applied); resolved once."""
        if self._spec is None:
            self._spec = load_model(self.model.name, self.model.overrides)
        return self._spec

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len or self.model_spec().max_position_embeddings

    def kv_cache_dtype_name(self) -> str:
        return resolve_kv_dtype(self.engine.kv_cache_dtype, self.engine.compute_dtype()).name

    def bytes_per_block(self) -> int:
        return bytes_per_block(self.model_spec(), self.engine.block_size, self.kv_cache_dtype_name())

    def num_gpu_blocks(self) -> int | None:
        """Pool blocks when the scenario fixes them (override or byte budget); None: measured on the device."""
        if self.engine.num_gpu_blocks_override is not None:
            return self.engine.num_gpu_blocks_override
        if self.engine.kv_cache_memory_bytes is not None:
            return blocks_in_budget(self.engine.kv_cache_memory_bytes, self.bytes_per_block())
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for result.json; `parse_scenario` accepts it back."""
        return self.model_dump(mode="json", exclude_none=True)


def check_against_model(scenario: Scenario) -> None:
    """Checks that need the model: unknown models, overrides, lengths that cannot fit, a pool too small."""
    if scenario.model.overrides:
        try:
            base = model_config(scenario.model.name)
        except KvplanError as exc:
            raise FieldIssue(("model",), str(exc)) from None
        try:
            check_overrides(scenario.model.overrides, base, scenario.model.name)
        except FieldIssue as issue:
            raise FieldIssue(("model", "overrides", *issue.subpath), issue.message) from None
    try:
        spec = scenario.model_spec()
    except KvplanError as exc:
        raise FieldIssue(("model",), str(exc)) from None
    engine = scenario.engine
    if engine.max_model_len is not None and engine.max_model_len > spec.max_position_embeddings:
        raise FieldIssue(("engine", "max_model_len"), f"{engine.max_model_len} exceeds {spec.name}'s "
                         f"max_position_embeddings {spec.max_position_embeddings}")
    if spec.vocab_size <= SPECIAL_TOKEN_IDS:
        raise FieldIssue(("model",), f"{spec.name}'s vocab_size {spec.vocab_size} leaves no ordinary token ids")
    limit = scenario.max_model_len
    for i, c in enumerate(scenario.workload.classes or ()):
        prompt_min = max(c.prompt_tokens.lower_tokens, c.shared_prefix.tokens + 1 if c.shared_prefix else 1)
        if prompt_min + c.output_tokens.lower_tokens > limit:
            raise FieldIssue(
                ("workload", "classes", i, "prompt_tokens"),
                f"impossible length: at least {prompt_min} prompt + "
                f"{c.output_tokens.lower_tokens} output tokens exceed max_model_len {limit}",
            )
    blocks = scenario.num_gpu_blocks()
    if blocks is not None and blocks * engine.block_size < limit:
        field = "num_gpu_blocks_override" if engine.num_gpu_blocks_override is not None else "kv_cache_memory_bytes"
        raise FieldIssue(
            ("engine", field),
            f"a pool of {blocks} blocks ({blocks * engine.block_size} tokens) cannot hold one "
            f"max_model_len {limit} request; raise it or lower engine.max_model_len",
        )

