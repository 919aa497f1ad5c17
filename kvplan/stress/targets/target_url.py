"""A `--target` URL, checked before anything uses it: scheme, host, port and characters."""
from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from kvplan.errors import KvplanError
from kvplan.stress.redact import without_userinfo


def public_url(url: str) -> str:
    """`url` without credentials or a trailing `/v1`: what may appear in output and errors; any
    URL an HTTP client could misread (a control character or space, a non-ASCII host or port, a
    port outside 1-65535, another scheme) is one `KvplanError` line."""
    text = url.strip()
    shown = repr(without_userinfo(text))[:200]
    if not text.isascii() or any(not c.isprintable() or c.isspace() for c in text):
        raise KvplanError(f"--target holds a character a URL cannot (a control, space or non-ASCII one): {shown}; "
                          "give http(s)://HOST:PORT")
    try:
        parts = urlsplit(text)
        port = parts.port  # parsing the port raises on a bad one
        usable = parts.scheme in ("http", "https") and bool(parts.hostname) and (port is None or port > 0)
    except ValueError:  # an unclosed IPv6 bracket, a port out of range
        usable = False
    if not usable or parts.hostname is None:
        raise KvplanError(f"--target must be an http(s) URL like http://HOST:PORT (port 1-65535), got {shown}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname  # IPv6 literals keep their brackets
    netloc = host if port is None else f"{host}:{port}"
    path = parts.path.rstrip("/").removesuffix("/v1")
    return urlunsplit((parts.scheme, netloc, path, "", ""))
