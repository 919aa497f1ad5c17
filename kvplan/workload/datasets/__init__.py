"""Real request files replayed as a run's requests, read as `vllm bench serve --dataset-name` reads
them: one module per dataset, each with `read(ref, path, ctx)`, registered in `READERS`.

Modules: sharegpt.py, custom.py, burstgpt.py, sonnet.py, hf.py, spec_bench.py (the readers), hf_files.py
(a Hugging Face dataset's rows from a local copy), ref.py (`DatasetRef`, a scenario's
dataset block), source.py (a file read within bounds, the readers' context), text.py (token counts
and ids of text), random_dataset.py (vLLM's random dataset of drawn lengths: no file).

Requests longer than the run's max_model_len are skipped and counted in a note. More requests than
the file holds: vLLM's oversampling (`random.choices` of the kept ones, seeded), unless
`oversample` is off (vLLM's --no-oversample: the run sends what the file holds). Bounds: files up to
MAX_DATASET_BYTES, at most MAX_ROWS rows read.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kvplan.errors import KvplanError
from kvplan.workload.datasets import burstgpt, custom, hf, sharegpt, sonnet, spec_bench
from kvplan.workload.datasets.ref import DATASET_NAMES, DatasetRef
from kvplan.workload.datasets.source import ReadContext, dataset_error
from kvplan.workload.datasets.text import TokenCounter
from kvplan.workload.request import Request

READERS: dict[str, Callable[[DatasetRef, Path, ReadContext], list[Request]]] = {
    "sharegpt": sharegpt.read, "custom": custom.read, "burstgpt": burstgpt.read, "sonnet": sonnet.read,
    "hf": hf.read, "spec_bench": spec_bench.read,
}
assert tuple(READERS) == DATASET_NAMES  # the schema's choices are the registry's


@dataclass
class DatasetStream:
    """The requests in replay order (`take(n)`), and notes on how they were read."""

    requests: list[Request]
    oversample: Callable[[int], list[Request]]
    notes: list[str] = field(default_factory=list)

    def take(self, n: int | None) -> Iterator[Request]:
        """The first `n` (None: forever); past the file's end, vLLM's seeded oversampling."""
        yield from self.requests[:n]
        if n is None:
            while more := self.oversample(len(self.requests)):  # empty: --no-oversample ends the stream
                yield from more
        elif n > len(self.requests):
            yield from self.oversample(n - len(self.requests))


def load_dataset(
    ref: DatasetRef, *, seed: int, vocab_size: int, max_model_len: int, num_requests: int | None
) -> DatasetStream:
    """The dataset's requests for one run (see the module doc); any problem is one `KvplanError` line."""
    path = Path(ref.path).expanduser()
    if ref.name != "hf" and not path.is_file():  # hf: a folder, a file or a cached repo id (hf_files.resolve)
        raise KvplanError(f"--dataset-path {ref.path}: no such file (a {ref.name} dataset)")
    ctx = ReadContext(seed, TokenCounter(ref.tokenizer, vocab_size), max_model_len, num_requests)
    kept = READERS[ref.name](ref, path, ctx)
    notes = ctx.notes
    if not kept:
        raise dataset_error(
            path, f"no request left to send (max_model_len {max_model_len:,}){': ' + '; '.join(notes) if notes else ''}"
        )
    if ref.tokenizer is None and any(r.prompt_text is not None for r in kept):
        notes.append("text prompts counted at ~4 bytes a token (no --tokenizer): the server's own counts are in "
                     "server_input_tokens; pass --tokenizer for vLLM's counts")
    if num_requests is not None and num_requests > len(kept) and not ref.oversample:
        notes.append(f"{len(kept):,} requests in {path.name}, not drawn again (--no-oversample): the run sends "
                     f"{len(kept):,} of {num_requests:,}")
    elif num_requests is not None and num_requests > len(kept):
        notes.append(f"{len(kept):,} requests in {path.name}; {num_requests - len(kept):,} more drawn again at random "
                     "(vLLM's oversampling)")

    rng = random.Random(seed)  # vLLM reseeds its global generator, then random.choices

    def oversample(k: int) -> list[Request]:
        return rng.choices(kept, k=k) if ref.oversample else []

    return DatasetStream(kept, oversample, notes)
