"""Fixtures: one real `kvplan serve` per test session (tiny-llama, small pool), a faulty server, and
two `kvplan serve` with API keys and short request deadlines for the security tests."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from server_helpers import ServeProcess, ThreadServer, faulty_app

POOL_BYTES = 4 * 2**20  # tiny-llama: 32 KiB per 16-token block -> 128 blocks
MAX_MODEL_LEN = 256
SERVER_ARGS = (
    "--model",
    "tiny-llama",
    "--kv-cache-memory-bytes",
    str(POOL_BYTES),
    "--max-model-len",
    str(MAX_MODEL_LEN),
    "--served-model-name",
    "tiny",
)
FLAG_KEY = "test-key-from-flag"
ENV_KEY = "test-key-from-env"
SECURED_TIMEOUT_S = 2.0  # --header-timeout-s and --body-timeout-s of the flag server
SECURED_MAX_REQUEST_BYTES = 2**20  # room for a 100k-deep body (200 KB), small enough to exceed cheaply
SECURED_MAX_CONNECTIONS = 256  # below the 1000 half-open sockets of the flood test, so eviction runs


@pytest.fixture(scope="session")
def kvplan_server() -> Iterator[ServeProcess]:
    server = ServeProcess(*SERVER_ARGS)
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


@dataclass(frozen=True)
class SecuredServers:
    flag: ServeProcess  # --api-key FLAG_KEY with KVPLAN_API_KEY=ENV_KEY set too (the flag must win), short limits
    env: ServeProcess  # KVPLAN_API_KEY=ENV_KEY only, default limits
    flag_key: str = FLAG_KEY
    env_key: str = ENV_KEY
    timeout_s: float = SECURED_TIMEOUT_S  # the flag server's --header-timeout-s and --body-timeout-s
    max_request_bytes: int = SECURED_MAX_REQUEST_BYTES  # the flag server's
    max_connections: int = SECURED_MAX_CONNECTIONS  # the flag server's


@pytest.fixture(scope="module")
def secured_servers() -> Iterator[SecuredServers]:
    """Both started at once (each start is 10-20 s here) and stopped at the end of the module."""
    started: list[ServeProcess] = []
    try:
        with pytest.MonkeyPatch.context() as env:  # ServeProcess copies os.environ when it starts the child
            env.setenv("KVPLAN_API_KEY", ENV_KEY)
            started.append(
                ServeProcess(
                    *SERVER_ARGS,
                    "--api-key",
                    FLAG_KEY,
                    "--header-timeout-s",
                    str(SECURED_TIMEOUT_S),
                    "--body-timeout-s",
                    str(SECURED_TIMEOUT_S),
                    "--max-request-bytes",
                    str(SECURED_MAX_REQUEST_BYTES),
                    "--max-connections",
                    str(SECURED_MAX_CONNECTIONS),
                )
            )
            started.append(ServeProcess(*SERVER_ARGS))
        for server in started:
            server.wait_healthy()
        yield SecuredServers(flag=started[0], env=started[1])
    finally:
        for server in started:
            server.stop()
