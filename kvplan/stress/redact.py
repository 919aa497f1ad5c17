"""Secrets out of every text that came from outside before kvplan stores or prints it.

An HTTP run sends the API key to a server, and a server (or a proxy in front of it) may send it
back: in an error page, an SSE `error` event, a `Location` header, a status line, a `/metrics`
answer. `redact` is the one function all those texts go through. It masks, in this order:

1. each known secret (the API key; also its URL-encoded and JSON-escaped forms), and any prefix of
   it of `MIN_PREFIX_CHARS` or more characters wherever it appears (a server that cut its echo, or
   a body kept only up to a byte limit, leaves a prefix): replaced by `SECRET_MARK`;
2. credential-looking values whatever they are: `Authorization: <scheme> xxx` (and `X-Api-Key`,
   `Api-Key`, `X-Auth-Token` headers), `Bearer xxx`, `key=xxx`, `api_key=xxx`, `token=xxx`,
   `access_token=xxx` (any `*_key`, `*_token`, `*secret`, `*password`, `*signature` parameter, in a
   query string, a form body or a JSON object) and `scheme://user:password@` in URLs: the value is
   replaced by `VALUE_MARK`;
3. with `max_chars`: the text is cut only after that, and what the cut left is masked once more
   (a secret's prefix ending at the cut).

Two marks, so a reader can tell "the server echoed your key" (`***`) from "a value that looked like
a credential was hidden" (`[REDACTED]`).
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

SECRET_MARK = "***"  # where a known secret (or a prefix of it) stood
VALUE_MARK = "[REDACTED]"  # where a value that looked like a credential stood
MIN_PREFIX_CHARS = 6  # a secret's prefix this long or longer is masked wherever it appears

# bounded repeats before a literal: an unbounded one would make a long run like "a-a-a-..." quadratic
_NOT_MASKED = r"(?!\*\*\*|\[REDACTED\])"  # a value already masked is left as it is
_VALUE = r"[^\s\"'`<>,;&()\[\]{}\\]+"  # a token: up to a space, a quote, a separator or a bracket
_SCHEME = r"(?:bearer|basic|token|digest|apikey)"  # of an Authorization value
_PARAM_WORDS = ("key", "token", "secret", "passw", "signature")  # what every _PARAM_NAME ends with
_PARAM_NAME = r"(?:[\w.-]{0,64}[_.-])?(?:api[_-]?key|key|token|secret|password|passwd|signature)"
_HEADER = re.compile(
    r"(?i)(?<![\w-])((?:proxy-)?authorization|x-api-key|api-key|x-auth-token)(\\?[\"']?\s*[:=]\s*\\?[\"']?)"
    r"(" + _SCHEME + r"\s+)?(?!" + _SCHEME + r"\s)" + _NOT_MASKED + _VALUE
)
_BEARER = re.compile(r"(?i)\b(bearer\s+)" + _NOT_MASKED + _VALUE)
_PARAM = re.compile(r"(?i)(?<![\w.-])(" + _PARAM_NAME + r"\s*=\s*)" + _NOT_MASKED + _VALUE)
_JSON_PARAM = re.compile(r"(?i)([\"']" + _PARAM_NAME + r"\\?[\"']\s*:\s*\\?[\"'])" + _NOT_MASKED + r"[^\"'\\]+")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,31}://)[^\s/@:\"'<>]+(?::[^\s/@\"'<>]*)?@")


def redact(text: str, secrets: Iterable[str | None] = (), *, max_chars: int | None = None) -> str:
    """`text` with `secrets` and credential-looking values masked; cut to `max_chars` after
    masking (never before: a cut key would no longer match), and masked again after the cut."""
    forms = _forms(secrets)
    out = _mask_patterns(_mask_secrets(text, forms))
    if max_chars is not None and len(out) > max_chars:
        out = out[:max_chars]
    return _mask_secrets(out, forms)  # what a pattern's replacement or the cut left behind


def redact_values(value: Any, secrets: Iterable[str | None] = ()) -> Any:
    """`value` with `redact` applied to every string in it (dict keys and values, list items)."""
    forms = tuple(secrets)
    if isinstance(value, str):
        return redact(value, forms)
    if isinstance(value, dict):
        return {redact_values(k, forms): redact_values(v, forms) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_values(v, forms) for v in value)
    return value


def _forms(secrets: Iterable[str | None]) -> tuple[str, ...]:
    """Each secret as sent and as a server may quote it back (URL-encoded, JSON-escaped); longest first."""
    forms = {form for s in secrets if s for form in (s, quote(s, safe=""), json.dumps(s)[1:-1])}
    return tuple(sorted(forms, key=len, reverse=True))


def _mask_secrets(text: str, forms: tuple[str, ...]) -> str:
    for secret in forms:
        text = _mask_one(text, secret)
    return text


def _mask_one(text: str, secret: str) -> str:
    """Mask `secret` and every prefix of it of MIN_PREFIX_CHARS or more characters."""
    if len(secret) <= MIN_PREFIX_CHARS:
        return text.replace(secret, SECRET_MARK)
    head = secret[:MIN_PREFIX_CHARS]
    pieces: list[str] = []
    pos = 0
    while (start := text.find(head, pos)) >= 0:
        end = start + MIN_PREFIX_CHARS
        while end - start < len(secret) and end < len(text) and text[end] == secret[end - start]:
            end += 1
        pieces += [text[pos:start], SECRET_MARK]
        pos = end
    return "".join(pieces) + text[pos:] if pieces else text


def _mask_patterns(text: str) -> str:
    """Each pattern runs only where its words occur (a cheap check first: an error page can be 64 kB)."""
    lower = text.lower()
    if "authorization" in lower or "api-key" in lower or "auth-token" in lower:
        text = _HEADER.sub(lambda m: f"{m[1]}{m[2]}{m[3] or ''}{VALUE_MARK}", text)
    if "bearer" in lower:
        text = _BEARER.sub(lambda m: f"{m[1]}{VALUE_MARK}", text)
    if any(word in lower for word in _PARAM_WORDS):
        text = _PARAM.sub(lambda m: f"{m[1]}{VALUE_MARK}", text) if "=" in text else text
        text = _JSON_PARAM.sub(lambda m: f"{m[1]}{VALUE_MARK}", text) if ":" in text else text
    if "://" in text and "@" in text:
        text = _USERINFO.sub(lambda m: f"{m[1]}{VALUE_MARK}@", text)
    return text


def without_userinfo(url: str) -> str:
    """`url` without any `user:password@`: what may be shown of a URL the user gave."""
    try:
        parts = urlsplit(url)
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    except ValueError:  # not even a URL (an unclosed IPv6 bracket): mask what looks like a credential
        return redact(url)
