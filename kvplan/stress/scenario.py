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

from collections.abc import Iterator
from typing import Any

from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from kvplan.engine.config import EngineConfig, engine_config_from
from kvplan.errors import KvplanError
from kvplan.gate.gate_block import Gate
from kvplan.plan.kv import blocks_in_budget, bytes_per_block
from kvplan.results.slo import Slo
from kvplan.spec.dtypes import resolve_kv_dtype
from kvplan.spec.profiles import load_model, model_config
from kvplan.stress.overrides import check_overrides
from kvplan.stress.replica_router import MAX_REPLICAS, check_replicas
from kvplan.validation import FieldIssue, StrictModel, first_error
from kvplan.validation import short_repr as _short
from kvplan.workload.arrivals import Arrival
from kvplan.workload.datasets import DatasetStream
from kvplan.workload.limits import MAX_DURATION_S, MAX_REQUESTS, SPECIAL_TOKEN_IDS
from kvplan.workload.request import Request
from kvplan.workload.workload import StreamSettings, Workload, dataset_stream, generate_requests, iter_requests


# --- model ------------------------------------------------------------------------------------
class ModelRef(StrictModel):
    name: str = Field(
        min_length=1, max_length=4096
    )  # bundled profile, alias, HF id, config.json path or model directory
    overrides: dict[str, Any] = Field(default_factory=dict, max_length=64)  # config.json keys, merged over the base


# --- the scenario -----------------------------------------------------------------------------
class Scenario(StrictModel):
    # a file-name-safe name: it names the output folder and the calibration file
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str = Field(default="", max_length=10_000)
    model: ModelRef
    engine: EngineConfig = Field(default_factory=EngineConfig)
    # the bundled engine as `replicas` engines, each with its own pool, behind `router`
    # (replica_router.py: round-robin, least-loaded, session, prefix); a --target server routes itself
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    router: str | None = None
    workload: Workload
    arrival: Arrival
    num_requests: int | None = Field(default=None, gt=0, le=MAX_REQUESTS)
    duration_s: float | None = Field(default=None, gt=0, le=MAX_DURATION_S)
    warmup_requests: int = Field(default=0, ge=0, le=MAX_REQUESTS)
    # more errored requests than this fraction: the run failed (exit 1)
    max_error_rate: float = Field(default=0.0, ge=0, le=1)
    seed: int = Field(default=0, ge=0, lt=2**63)
    slo: Slo = Field(default_factory=Slo)
    gate: Gate = Field(default_factory=Gate)

    _spec: Any = PrivateAttr(default=None)
    _kv_decided: tuple[tuple[str, str], str] | None = PrivateAttr(default=None)  # (its inputs, the answer)

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
        check_replicas(self.replicas, self.router)
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

    def stream_settings(self, vocab_size: int | None = None) -> StreamSettings:
        """The request stream's seed, bounds and length (`vocab_size`: the model's unless given)."""
        vocab = int(vocab_size if vocab_size is not None else self.model_spec().vocab_size)
        return StreamSettings(self.seed, vocab, self.max_model_len, self.num_requests, self.duration_s,
                              self.warmup_requests)

    def request_stream(self, vocab_size: int | None = None, stream: DatasetStream | None = None) -> Iterator[Request]:
        """The scenario's requests in sending order (a closed loop with duration_s: forever)."""
        return iter_requests(self.workload, self.arrival, self.stream_settings(vocab_size), stream)

    def requests(self, vocab_size: int | None = None, max_requests: int | None = None) -> list[Request]:
        """The whole request stream (`max_requests` caps it; needed when the stream has no end)."""
        return generate_requests(self.workload, self.arrival, self.stream_settings(vocab_size), max_requests)

    def dataset_stream(self, vocab_size: int | None = None) -> DatasetStream:
        """The scenario's dataset, read for this run."""
        return dataset_stream(self.workload, self.stream_settings(vocab_size))

    def kv_cache_dtype_name(self) -> str:
        """The KV dtype the engine caches (`auto`: its compute dtype); decided once (a copy with
        another engine setting decides again)."""
        asked = (self.engine.kv_cache_dtype, self.engine.compute_dtype())
        if self._kv_decided is None or self._kv_decided[0] != asked:
            self._kv_decided = (asked, resolve_kv_dtype(*asked).name)
        return self._kv_decided[1]

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
        """JSON-ready form for result.json; `parse_scenario` accepts it back. One replica is left
        out, so a one-engine run's settings read as they did before replicas (the gate compares them
        with older baselines)."""
        data = self.model_dump(mode="json", exclude_none=True)
        if data.get("replicas") == 1:
            del data["replicas"]
        return data


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
        prompt_min = c.min_prompt_tokens
        if prompt_min + c.output_tokens.lower_tokens > limit:
            raise FieldIssue(
                ("workload", "classes", i, "prompt_tokens"),
                f"impossible length: at least {prompt_min} prompt + "
                f"{c.output_tokens.lower_tokens} output tokens exceed max_model_len {limit}",
            )
    repetition = scenario.workload.prefix_repetition
    if repetition is not None and \
            repetition.prefix_tokens + repetition.suffix_tokens + repetition.output_tokens > limit:
        raise FieldIssue(("workload", "prefix_repetition"), f"impossible length: {repetition.prefix_tokens} prefix + "
                         f"{repetition.suffix_tokens} suffix + {repetition.output_tokens} output tokens exceed "
                         f"max_model_len {limit}")
    blocks = scenario.num_gpu_blocks()
    if blocks is not None and blocks * engine.block_size < limit:
        field = "num_gpu_blocks_override" if engine.num_gpu_blocks_override is not None else "kv_cache_memory_bytes"
        raise FieldIssue(
            ("engine", field),
            f"a pool of {blocks} blocks ({blocks * engine.block_size} tokens) cannot hold one "
            f"max_model_len {limit} request; raise it or lower engine.max_model_len",
        )

