"""The door of `kvplan serve`: its API key, request deadlines, size limits and connection cap.

Import-light (no Starlette, uvicorn or torch) so the command line can check these flags before the
seconds-long engine import. Where each limit is enforced:
  api key, body deadline, body size  -> kvplan.server.middleware (ASGI, before the routes)
  JSON nesting depth                 -> kvplan.server.protocol.parse_json_body
  header deadline, connection cap    -> kvplan.server.connection (uvicorn's h11 protocol; an ASGI app
                                        hears of a request only once its headers are complete)
"""
from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field
from pathlib import Path

from kvplan.errors import KvplanError, read_user_file

API_KEY_ENV = "KVPLAN_API_KEY"
DEFAULT_HEADER_TIMEOUT_S = 10.0  # a request line and headers are a few hundred bytes: seconds are plenty
DEFAULT_BODY_TIMEOUT_S = 30.0  # 16 MiB at ~0.5 MiB/s; prompts are far smaller
DEFAULT_MAX_REQUEST_BYTES = 16 * 2**20
DEFAULT_MAX_CONNECTIONS = 4096
MAX_HEADER_BYTES = 16 * 1024  # h11's own default, passed explicitly so it is a decision, not an accident
MAX_JSON_DEPTH = 64  # OpenAI bodies nest 4-5 deep (tools schemas a little more)
FD_HEADROOM = 1024  # descriptors beyond the connections: model files, torch threads, pipes
# Routes anyone may read even with a key set: load balancers probe /health, and vLLM leaves /metrics
# open too (its key guards /v1/* only); neither shows a prompt or spends the engine's time.
OPEN_PATHS = frozenset({"/health", "/metrics"})


def _positive_finite(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise KvplanError(f"{name} must be a positive number, got {value}")


def check_api_key(key: str) -> None:
    """Header-safe keys only; the message never repeats the key (it may be a real one, mistyped)."""
    if not key:
        raise KvplanError(f"--api-key / {API_KEY_ENV} must not be empty")
    if not all(0x21 <= ord(c) <= 0x7E for c in key):
        raise KvplanError(f"--api-key / {API_KEY_ENV} must be printable ASCII without spaces "
                          "(it travels in an HTTP header)")


def read_api_key_file(path: str | Path) -> str:
    """The key on the first line of `path` (--api-key-file: it never shows in `ps`), checked as a key."""
    text = read_user_file(path, "API key", max_bytes=64 * 1024)
    key = (text.splitlines() or [""])[0].strip()
    if not key:
        raise KvplanError(f"{path}: the API key file's first line is empty")
    check_api_key(key)
    return key


@dataclass(frozen=True)
class ServeLimits:
    """What a client must show and may cost. `api_key` None: no authentication."""

    api_key: str | None = field(default=None, repr=False)  # never in a repr, a log line or an error
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    def __post_init__(self) -> None:
        if self.api_key is not None:
            check_api_key(self.api_key)
        _positive_finite("--header-timeout-s", self.header_timeout_s)
        _positive_finite("--body-timeout-s", self.body_timeout_s)
        if self.max_request_bytes < 1024:
            raise KvplanError(f"--max-request-bytes must be at least 1024, got {self.max_request_bytes}")
        if self.max_connections < 1:
            raise KvplanError(f"--max-connections must be at least 1, got {self.max_connections}")


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and `localhost`; anything else (0.0.0.0, ::, a name) may be reachable from elsewhere."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def exposure_warning(host: str, limits: ServeLimits) -> str | None:
    """The stderr line for a server anyone on the network can use, or None."""
    if limits.api_key is not None or is_loopback(host):
        return None
    return (f"kvplan: WARNING: no API key (--api-key / {API_KEY_ENV}) and --host {host} is not loopback: "
            "this server is unauthenticated and reachable beyond this machine")


def raise_open_file_limit(max_connections: int) -> str | None:
    """Lift the soft RLIMIT_NOFILE towards the hard one so `max_connections` sockets fit (as vLLM lifts
    it at start): at the common soft limit of 1024, accept() fails with EMFILE long before the cap,
    and asyncio then stops accepting anyone for a second at a time. Returns a warning when the hard
    limit is too low, else None."""
    try:
        import resource
    except ImportError:  # not a Unix: nothing to raise
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_connections + FD_HEADROOM
    if soft == resource.RLIM_INFINITY or soft >= want:
        return None
    new = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if new > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    if new < want:
        return (f"kvplan: WARNING: the open-file limit ({new}) is below --max-connections + {FD_HEADROOM} ({want}); "
                "new connections may be refused before the cap (raise `ulimit -n` or lower --max-connections)")
    return None
