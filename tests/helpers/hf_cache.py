"""A fake Hugging Face cache with huggingface_hub's real layout (`models--owner--name/refs/<ref>`
holding a commit hash, `blobs/<sha>` and `snapshots/<hash>/<file>` linking to its blob), shared by
tests/spec/test_hub.py and tests/test_wheel.py."""
from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QWEN3_8B = ROOT / "tests" / "data" / "reference" / "hf-configs" / "Qwen--Qwen3-8B" / "config.json"
FAKE_ID = "kvplan-test/Qwen3-8B-copy"  # a made-up repo id no bundled profile carries
QWEN3_8B_KV_BYTES_PER_TOKEN = 36 * 2 * 8 * 128 * 2  # layers x (K, V) x KV heads x head_dim x bf16
MAIN_SHA = "a" * 40
OTHER_SHA = "b" * 40


def put(
    cache: Path, repo_id: str, commit: str, files: dict[str, bytes | str], refs: tuple[str, ...] = ("main",)
) -> Path:
    """Write `files` into the snapshot `commit` of `repo_id` (each a link to its blob), point
    `refs` at it, and return the snapshot folder."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for name, content in files.items():
        data = content.encode() if isinstance(content, str) else content
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    for ref in refs:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return snapshot


def safetensors(tensor_bytes: int) -> bytes:
    header = json.dumps(
        {
            "__metadata__": {"format": "pt"},
            "w": {"dtype": "BF16", "shape": [tensor_bytes // 2], "data_offsets": [0, tensor_bytes]},
        }
    ).encode()
    return struct.pack("<Q", len(header)) + header + b"\0" * tensor_bytes
