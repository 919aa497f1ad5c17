"""Fixtures: one real `kvplan serve` per test session (tiny-llama, small pool) and a faulty server."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from server_helpers import ServeProcess, ThreadServer, faulty_app

POOL_BYTES = 4 * 2**20  # tiny-llama: 32 KiB per 16-token block -> 128 blocks
MAX_MODEL_LEN = 256


@pytest.fixture(scope="session")
def kvplan_server() -> Iterator[ServeProcess]:
    server = ServeProcess("--model", "tiny-llama", "--kv-cache-memory-bytes", str(POOL_BYTES),
                          "--max-model-len", str(MAX_MODEL_LEN), "--served-model-name", "tiny")
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


@pytest.fixture()
def faulty_server() -> Iterator[tuple[ThreadServer, list[str]]]:
    seen_auth: list[str] = []
    server = ThreadServer(faulty_app(stall_s=5.0, seen_auth=seen_auth))
    server.start()
    try:
        yield server, seen_auth
    finally:
        server.stop()
