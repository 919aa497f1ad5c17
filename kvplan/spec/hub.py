"""Hugging Face repo ids (`owner/name`, `owner/name@revision`) for `--model`, read without weights.

Where a repo id that no bundled profile carries is looked for, in order:
1. the local Hugging Face cache (`$HF_HUB_CACHE`, else `$HUGGINGFACE_HUB_CACHE`, else
   `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`,
   as huggingface_hub finds it, but read from the environment at call time): config.json at the
   revision (default `main`), and the weight bytes from a cached `model.safetensors.index.json`
   (`metadata.total_size`) or the cached safetensors headers;
2. unless `HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) is set, the Hub itself: config.json and the
   safetensors index (both land in the cache, so the next run is offline-ready), or, for a one-file
   checkpoint, its safetensors header read over HTTP. `HF_TOKEN` opens gated repos.

huggingface_hub is imported inside the functions that need it: `kvplan estimate` with a bundled
profile never imports it, and it never imports torch.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvplan.errors import ConfigError, KvplanError, UnknownNameError
from kvplan.spec.model import load_config_json

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
HUB_URL = "https://huggingface.co"

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
_SHARD = re.compile(r"-\d+-of-(\d+)\.safetensors$")
_TRUE = {"1", "ON", "YES", "TRUE"}
_FETCHED: dict[tuple[str, str | None, str], HubModel] = {}  # one Hub round trip per process


class HubModelNotFoundError(UnknownNameError):
    """A repo id found in none of the places tried; the message lists each place and why."""

    def __init__(self, message: str) -> None:
        KvplanError.__init__(self, message)


@dataclass(frozen=True)
class HubModel:
    """A model's config.json (and weight bytes when known) read from the cache or the Hub."""

    repo_id: str  # as the cache folder (or the user) spells it
    revision: str | None
    config: dict[str, Any]
    config_path: Path  # the cached config.json
    weights_bytes: int | None  # real checkpoint bytes, when an index or safetensors headers were seen
    fetched: bool  # True when this run downloaded it


class _NotFetched(Exception):
    """Why the Hub did not give a config.json (one short clause)."""


def split_repo_id(text: str) -> tuple[str, str | None] | None:
    """`owner/name[@revision]` -> (repo id, revision or None); None when `text` is not shaped so."""
    repo, sep, revision = text.partition("@")
    if sep and (not revision or any(c.isspace() for c in revision)):
        return None
    if not _REPO_ID.match(repo) or "--" in repo or ".." in repo or repo.endswith((".json", ".git")):
        return None
    if any(len(part) > 96 for part in repo.split("/")):  # the Hub's own limit on owner and name
        return None
    return repo, revision or None


def hub_cache_dir() -> Path:
    """huggingface_hub's cache folder, from the environment as it is now (huggingface_hub reads it
    once, at import)."""
    env = os.environ
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    home = os.path.expandvars(os.path.expanduser(home))
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return Path(os.path.expandvars(os.path.expanduser(cache)))


def hub_offline() -> bool:
    """`HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) set to 1/on/yes/true, read now."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in _TRUE


def _offline_var() -> str:
    name = "HF_HUB_OFFLINE" if os.environ.get("HF_HUB_OFFLINE") else "TRANSFORMERS_OFFLINE"
    return f"{name}={os.environ.get(name)}"


def cached_repo_id(cache_dir: Path, repo_id: str) -> str:
    """`repo_id` as the cache folder spells it (Hub ids are case-insensitive; cache folders are not)."""
    if (cache_dir / f"models--{repo_id.replace('/', '--')}").is_dir():
        return repo_id
    wanted = f"models--{repo_id.replace('/', '--')}".lower()
    try:
        for entry in os.scandir(cache_dir):
            if entry.name.lower() == wanted and entry.is_dir():
                return entry.name[len("models--"):].replace("--", "/", 1)
    except OSError:
        pass
    return repo_id


def cached_weight_bytes(snapshot: Path) -> int | None:
    """Checkpoint bytes of a cached snapshot: the index's total_size, else the headers of its
    safetensors files (every shard of a sharded checkpoint, else `model.safetensors`, else all);
    None when neither is cached."""
    from kvplan.spec.checkpoint import header_bytes, index_total_bytes

    if (snapshot / INDEX_FILE).is_file():
        total = index_total_bytes(snapshot / INDEX_FILE)
        if total:
            return total
    files = sorted(f for f in snapshot.glob("*.safetensors") if f.is_file())  # a dangling blob link is not there
    shards = [f for f in files if _SHARD.search(f.name)]
    if shards:
        counts = {int(m.group(1)) for f in shards if (m := _SHARD.search(f.name))}
        if len(counts) != 1 or len(shards) != counts.pop():
            return None  # only some shards are cached: a partial sum would mislead
        files = shards
    elif (snapshot / "model.safetensors") in files:
        files = [snapshot / "model.safetensors"]  # not a `consolidated.safetensors` copy beside it
    return sum(header_bytes(f) for f in files) if files else None


def from_cache(repo_id: str, revision: str | None, cache_dir: Path) -> HubModel | None:
    """The model at `revision` in the local cache (config.json needed), or None."""
    from huggingface_hub import try_to_load_from_cache

    repo_id = cached_repo_id(cache_dir, repo_id)
    found = try_to_load_from_cache(repo_id, CONFIG_FILE, cache_dir=str(cache_dir), revision=revision)
    if not isinstance(found, str):
        return None  # not cached (None), or cached as missing at that commit (_CACHED_NO_EXIST)
    path = Path(found)
    return HubModel(repo_id, revision, load_config_json(path), path, cached_weight_bytes(path.parent), fetched=False)


def _http_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def _root_cause(exc: BaseException) -> str:
    """The innermost exception's first line (a DNS or connection error, not the wrapper's advice)."""
    seen = {id(exc)}
    while (inner := exc.__cause__ or exc.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        exc = inner
    return f"{type(exc).__name__}: {_first_line(exc)}"


def _fetch_reason(exc: Exception, repo_id: str, revision: str | None) -> str:
    """One clause for why the Hub did not hand over config.json."""
    from huggingface_hub import errors as hf

    licence = f"set HF_TOKEN to a token whose account has accepted the licence at {HUB_URL}/{repo_id}"
    status = _http_status(exc)
    if isinstance(exc, hf.GatedRepoError):
        return f"gated repo, HTTP {status}: {licence}"
    if isinstance(exc, hf.RepositoryNotFoundError):
        if status == 401:
            return f"HTTP 401: no such repo, or a private or gated one; {licence}"
        return f"no such repo on the Hub (HTTP {status})"
    if isinstance(exc, hf.RevisionNotFoundError):
        return f"no revision {revision!r} on the Hub"
    if isinstance(exc, hf.RemoteEntryNotFoundError):
        return f"the repo has no {CONFIG_FILE}"
    if isinstance(exc, (hf.OfflineModeIsEnabled, hf.LocalEntryNotFoundError)):
        return f"cannot reach the Hugging Face Hub: {_root_cause(exc)}; HF_HUB_OFFLINE=1 skips the Hub"
    if isinstance(exc, hf.HfHubHTTPError):
        return f"HTTP {status}: {_first_line(exc)}"
    return f"{type(exc).__name__}: {_first_line(exc)}"


def _remote_weight_bytes(repo_id: str, revision: str | None, cache_dir: Path) -> int | None:
    """The index's total_size (downloaded into the cache), else one safetensors file's header over
    HTTP; None for a repo without safetensors or on any error (the weights are then computed)."""
    from huggingface_hub import errors as hf
    from huggingface_hub import get_safetensors_metadata, hf_hub_download

    from kvplan.spec.checkpoint import index_total_bytes

    try:
        return index_total_bytes(Path(hf_hub_download(repo_id, INDEX_FILE, revision=revision, cache_dir=str(cache_dir),
                                                 library_name="kvplan")))
    except hf.RemoteEntryNotFoundError:
        pass
    except (hf.HfHubHTTPError, hf.EntryNotFoundError, OSError, ValueError, ConfigError):
        return None
    try:
        meta = get_safetensors_metadata(repo_id, revision=revision)
    except (hf.HfHubHTTPError, hf.NotASafetensorsRepoError, hf.SafetensorsParsingError, OSError, ValueError):
        return None
    total = sum(end - start for f in meta.files_metadata.values() for start, end in
                (t.data_offsets for t in f.tensors.values()))
    return total or None


HUB_PROBE_TIMEOUT_S = 1.5  # one TCP connect to the Hub's host before huggingface_hub's retries (~25 s offline)


def hub_unreachable() -> str | None:
    """Why the Hub's host cannot be reached now (DNS or TCP within HUB_PROBE_TIMEOUT_S), or None.
    A machine without network fails here at once instead of in huggingface_hub's retry loop."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=HUB_PROBE_TIMEOUT_S):
            return None
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc or 'timed out'} ({host}:{port})"


def fetch(repo_id: str, revision: str | None, cache_dir: Path) -> HubModel:
    """config.json (and the weight bytes) from the Hub, into the cache; `_NotFetched` says why not."""
    key = (repo_id.lower(), revision, str(cache_dir))
    if key in _FETCHED:
        return _FETCHED[key]
    unreachable = hub_unreachable()
    if unreachable:
        raise _NotFetched(f"cannot reach the Hugging Face Hub: {unreachable}; HF_HUB_OFFLINE=1 skips the Hub")
    from huggingface_hub import hf_hub_download

    try:
        path = Path(hf_hub_download(repo_id, CONFIG_FILE, revision=revision, cache_dir=str(cache_dir),
                                    library_name="kvplan"))
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clause of the error line
        raise _NotFetched(_fetch_reason(exc, repo_id, revision)) from None
    model = HubModel(repo_id, revision, load_config_json(path), path,
                     _remote_weight_bytes(repo_id, revision, cache_dir), fetched=True)
    _FETCHED[key] = model
    return model


def resolve_repo(text: str, repo_id: str, revision: str | None) -> HubModel:
    """`text` (`repo_id[@revision]`, which no bundled profile carries) from the cache, else the Hub;
    `HubModelNotFoundError` lists every place tried and why each failed."""
    cache_dir = hub_cache_dir()
    model = from_cache(repo_id, revision, cache_dir)
    if model is not None:
        return model
    at = f", revision {revision}" if revision else ""
    if hub_offline():
        fetched = f"not fetched ({_offline_var()})"
    else:
        try:
            return fetch(repo_id, revision, cache_dir)
        except _NotFetched as exc:
            fetched = f"not fetched ({exc})"
    raise HubModelNotFoundError(
        f"{text}: not a bundled profile (no profile has hf_id {repo_id}), not in the Hugging Face cache "
        f"({cache_dir}{at}), {fetched}, not a local path")
