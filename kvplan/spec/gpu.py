"""`GpuSpec` and the catalog in `kvplan/data/gpus.yaml` (marketed and CUDA-visible memory, bandwidth, throughput)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvplan.errors import ConfigError, KvplanError, UnknownNameError

GIB = 2**30


@dataclass(frozen=True)
class GpuSpec:
    name: str
    display_name: str
    vendor: str
    memory_marketed_gb: float  # decimal GB as sold
    cuda_total_bytes: int | None  # total as torch.cuda.mem_get_info reports it (what vLLM budgets)
    cuda_total_source: str = ""
    nvidia_smi_total_mib: int | None = None
    memory_bandwidth_gbps: float | None = None  # decimal GB/s
    bf16_dense_tflops: float | None = None
    fp8_dense_tflops: float | None = None
    int8_dense_tops: float | None = None
    fp16_dense_tflops: float | None = None  # Turing / Volta have no bf16: vLLM serves them in float16
    interconnect: str = ""
    host_link: str = ""  # PCIe generation or NVLink-C2C: what a CPU KV tier's copies cross
    host_link_gbps: float | None = None  # nominal, per direction, decimal GB/s
    architecture: str = ""
    aliases: tuple[str, ...] = ()
    source: str = ""

    @property
    def memory_bytes(self) -> int:
        if self.cuda_total_bytes is None:
            raise KvplanError(f"GPU {self.name!r} has no known device memory; pass --gpu-memory-gib")
        return int(self.cuda_total_bytes)

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


def custom_gpu(memory_gib: float) -> GpuSpec:
    """A GPU given only by its total memory as CUDA reports it (`--gpu-memory-gib`)."""
    if not 0 < memory_gib <= 2**20:  # also refuses nan and inf
        raise KvplanError(f"--gpu-memory-gib must be a number of GiB in (0, 1048576], got {memory_gib}")
    return GpuSpec(name=f"custom-{memory_gib:g}gib", display_name=f"{memory_gib:g} GiB GPU", vendor="",
                   memory_marketed_gb=memory_gib * GIB / 1e9, cuda_total_bytes=int(memory_gib * GIB),
                   cuda_total_source="--gpu-memory-gib")


PositiveNumber = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class _GpuRow(BaseModel):
    """One catalog row as the file must hold it ($KVPLAN_DATA may point at a user's copy)."""

    model_config = ConfigDict(extra="allow", strict=True)  # memory_type, fp4 throughput, tdp_w, notes: kept as is
    name: str = Field(min_length=1, max_length=100)
    aliases: list[Annotated[str, Field(min_length=1, max_length=100)]] = []
    display_name: str | None = None
    vendor: str | None = None
    architecture: str | None = None
    interconnect: str | None = None
    host_link: str | None = None
    host_link_gbps: PositiveNumber | None = None
    source: str | None = None
    cuda_total_source: str | None = None
    memory_marketed_gb: PositiveNumber
    cuda_total_bytes: Annotated[int, Field(gt=0)] | None = None
    nvidia_smi_total_mib: Annotated[int, Field(gt=0)] | None = None
    memory_bandwidth_gbps: PositiveNumber | None = None
    bf16_dense_tflops: PositiveNumber | None = None
    fp8_dense_tflops: PositiveNumber | None = None
    int8_dense_tops: PositiveNumber | None = None
    fp16_dense_tflops: PositiveNumber | None = None


def _rows(path: object, data: object) -> list[_GpuRow]:
    if not isinstance(data, list):
        raise ConfigError(f"{path}: the GPU catalog must be a list of GPUs, got {type(data).__name__}")
    rows = []
    for i, row in enumerate(data):
        try:
            rows.append(_GpuRow.model_validate(row))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"]) or "row"
            name = row.get("name") if isinstance(row, dict) else None
            raise ConfigError(
                f"{path}: GPU #{i + 1}{f' ({name!r:.60})' if name else ''}: {where}: {err['msg']}"
            ) from None
    return rows


@lru_cache(maxsize=1)
def gpu_catalog() -> dict[str, GpuSpec]:
    """Canonical name -> GpuSpec."""
    import yaml

    from kvplan.spec.catalog_files import bundled_dir

    path = bundled_dir() / "gpus.yaml"
    try:
        data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: ~10x faster
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read the GPU catalog ({exc})") from None
    catalog: dict[str, GpuSpec] = {}
    for row in _rows(path, data or []):
        fields = {k: getattr(row, k) for k in GpuSpec.__dataclass_fields__ if k in _GpuRow.model_fields}
        fields["aliases"] = tuple(a.lower() for a in row.aliases)
        for key in ("interconnect", "host_link", "architecture", "source", "cuda_total_source", "vendor",
                    "display_name"):
            fields[key] = str(fields.get(key) or "")
        catalog[row.name] = GpuSpec(**fields)
    return catalog


def load_gpu(name: str) -> GpuSpec:
    catalog = gpu_catalog()
    key = name.lower()
    for gpu in catalog.values():
        if key == gpu.name or key in gpu.aliases:
            return gpu
    raise UnknownNameError("GPU", name, [n for g in catalog.values() for n in (g.name, *g.aliases)])
