"""A dataset file read within bounds, and its errors, each naming the file."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kvplan.errors import KvplanError, read_user_file
from kvplan.workload.datasets.text import TokenCounter

MAX_DATASET_BYTES = 2 * 2**30  # ShareGPT_V3_unfiltered_cleaned_split.json is 642 MB
MAX_ROWS = 5_000_000


def read_dataset_text(path: Path) -> str:
    return read_user_file(path, "dataset", max_bytes=MAX_DATASET_BYTES)


def dataset_error(path: Path, what: str) -> KvplanError:
    return KvplanError(f"dataset {path}: {what}")


@dataclass
class ReadContext:
    """What every dataset reader is given: the run's seed, a token counter, the longest request
    that fits, how many requests the run wants (None: all) and the notes it adds to."""

    seed: int
    counter: TokenCounter
    max_model_len: int
    num_requests: int | None
    notes: list[str] = field(default_factory=list)
