"""The rows of a Hugging Face dataset read offline, as `datasets.load_dataset(path, name=subset,
split=split)` reads a local one: `path` is a folder (a `hf download --repo-type dataset --local-dir`
copy), one data file, or a repo id already in the Hugging Face cache (nothing is downloaded).

Data files are Parquet (needs pyarrow), JSON lines, JSON (a list of rows) and CSV. A config
(`--hf-subset`) is a folder of that name; a file's split is the folder or the first word of its name
that names a split (`data/train-00000-of-00001.parquet`, `test.jsonl`), and a file that names none
is in `train`, as the datasets library assigns it. Bounds: MAX_DATASET_BYTES in all, MAX_ROWS rows,
MAX_FILES files.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError
from kvplan.workload.datasets.source import MAX_DATASET_BYTES, MAX_ROWS, dataset_error, read_dataset_text

SUFFIXES = (".parquet", ".jsonl", ".json", ".csv")
MAX_FILES = 10_000
# the datasets library's split keywords (data_files.py), each folded onto its split's name
SPLIT_WORDS = {"train": "train", "training": "train", "validation": "validation", "valid": "validation",
               "dev": "validation", "val": "validation", "test": "test", "testing": "test", "eval": "test",
               "evaluation": "test"}
REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def resolve(path_text: str, base: Path | None = None) -> Path:
    """The folder or file to read: a local path, else a dataset repo id from the local cache."""
    path = Path(path_text).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    if path.exists():
        return path
    if REPO_ID.match(path_text):
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(path_text, repo_type="dataset", local_files_only=True))
        except Exception:  # noqa: BLE001 - any cache miss reads as "not downloaded"
            pass
    raise KvplanError(
        f"--dataset-path {path_text}: not a local folder or file, nor a dataset in the Hugging Face cache "
        f"(kvplan reads offline: `hf download {path_text if REPO_ID.match(path_text) else 'REPO'} "
        "--repo-type dataset --local-dir DIR`, then --dataset-path DIR --hf-name REPO)"
    )


def _split_of(rel: Path) -> str:
    words = [part.lower() for part in rel.parent.parts] + [re.split(r"[-_.]", rel.stem.lower())[0]]
    return next((SPLIT_WORDS[w] for w in words if w in SPLIT_WORDS), "train")


def data_files(root: Path, subset: str | None, split: str) -> list[Path]:
    """The data files of `subset` and `split` under `root` (a file is its own only file)."""
    if root.is_file():
        return [root]
    found: list[Path] = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or path.suffix.lower() not in SUFFIXES:
            continue
        if len(found) >= MAX_FILES:
            raise dataset_error(root, f"more than {MAX_FILES:,} data files; point --dataset-path at one config")
        if path.is_file():
            found.append(path)
    if not found:
        raise dataset_error(root, f"no data file ({', '.join(SUFFIXES)}) in the folder")
    if subset is not None:
        configs = sorted({p.relative_to(root).parts[0] for p in found if len(p.relative_to(root).parts) > 1})
        found = [p for p in found if subset in p.relative_to(root).parts[:-1]]
        if not found:
            raise dataset_error(root, f"--hf-subset {subset!r}: no folder of that name (folders: "
                                f"{', '.join(configs) or 'none'})")
    wanted = SPLIT_WORDS.get(split.lower(), split.lower())
    picked = [p for p in found if _split_of(p.relative_to(root)) == wanted]
    if not picked:
        splits = sorted({_split_of(p.relative_to(root)) for p in found})
        raise dataset_error(root, f"--hf-split {split!r}: no data file of that split (splits: {', '.join(splits)})")
    return picked


def _json_rows(path: Path) -> Iterator[dict[str, Any]]:
    text = read_dataset_text(path)
    stripped = text.lstrip()
    if path.suffix.lower() == ".json" and stripped.startswith("["):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise dataset_error(path, f"not JSON: {str(exc)[:120]}") from None
        yield from (row for row in data if isinstance(row, dict))
        return
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise dataset_error(path, f"line {number}: not a JSON object: {str(exc)[:120]}") from None
        if isinstance(row, dict):
            yield row


def _table_rows(path: Path) -> Iterator[dict[str, Any]]:
    import pandas as pd

    try:
        if path.suffix.lower() == ".csv":
            frame = pd.read_csv(path, nrows=MAX_ROWS)
        else:
            frame = pd.read_parquet(path)
    except ImportError:
        raise KvplanError(f"dataset {path}: reading Parquet needs pyarrow (pip install pyarrow), or give the "
                          "rows as JSON lines") from None
    except Exception as exc:  # noqa: BLE001 - pandas/pyarrow raise many types for a bad file
        raise dataset_error(path, f"cannot read it: {(str(exc).splitlines() or [type(exc).__name__])[0][:160]}") \
            from None
    yield from frame.to_dict("records")


def read_rows(root: Path, subset: str | None, split: str) -> list[dict[str, Any]]:
    """Every row of the chosen files, in file order, within the bounds above."""
    files = data_files(root, subset, split)
    total_bytes = sum(p.stat().st_size for p in files)
    if total_bytes > MAX_DATASET_BYTES:
        raise dataset_error(root, f"{total_bytes / 2**30:.1f} GiB of data files; at most "
                            f"{MAX_DATASET_BYTES / 2**30:.0f} GiB are read")
    rows: list[dict[str, Any]] = []
    for path in files:
        reader = _json_rows if path.suffix.lower() in (".json", ".jsonl") else _table_rows
        for row in reader(path):
            rows.append(row)
            if len(rows) >= MAX_ROWS:
                return rows
    return rows
