"""The bundled catalog of model profiles (`profiles/*.yaml`), and what `--model` resolves to.

`--model` (`load_model`, `model_config`) is tried in this order:
1. a bundled profile name or alias (`llama-2-7b`);
2. a Hugging Face repo id `owner/name[@revision]` that is not an existing path: (a) the bundled
   profile whose `hf_id` it is (any case; a revision is ignored), else (b) the local Hugging Face
   cache, else (c) the Hub unless offline (`kvplan.spec.hub`);
3. a local model directory; 4. a config.json path (an existing path beats a repo id of the same text).

Loading is lazy and cached; `kvplan estimate` reads one small YAML file per call and imports
huggingface_hub only for repo ids that no bundled profile carries.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from kvplan.errors import ConfigError, UnknownNameError
from kvplan.spec.catalog_files import profiles_dir
from kvplan.spec.model import ModelSpec, load_config_json, spec_from_config, spec_from_path
from kvplan.validation import number_problem


def _read_yaml(path: Path) -> Any:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader when libyaml is there
    try:
        return yaml.load(path.read_text(), Loader=loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML ({exc})") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise ConfigError(f"{path}: {number_problem(exc)}") from None


def _header_aliases(text: str) -> list[str]:
    """Aliases from the YAML header (inline `[a, b]` or block `- a` lists), without a full parse."""
    aliases: list[str] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("config:"):
            break
        if line.startswith("aliases:"):
            body = line.split(":", 1)[1].strip()
            if body.startswith("["):
                aliases += [a.strip().strip("'\"") for a in body.strip("[]").split(",")]
            else:
                for item in lines[i + 1:]:
                    if not item.lstrip().startswith("- "):
                        break
                    aliases.append(item.lstrip()[2:].strip().strip("'\""))
    return [a.lower() for a in aliases if a]


def _header_value(text: str, key: str) -> str | None:
    """A top-level scalar (`hf_id: x`) from the YAML header, before `config:`, without a full parse."""
    for line in text.splitlines():
        if line.startswith("config:"):
            break
        if line.startswith(f"{key}:"):
            value = line.split(":", 1)[1].strip().strip("'\"")
            return None if value in ("", "null", "~") else value
    return None


@lru_cache(maxsize=1)
def model_index() -> dict[str, Path]:
    """Every canonical name and alias -> its profile file (header scan: no YAML parse per file)."""
    index: dict[str, Path] = {}
    for path in sorted(profiles_dir().glob("*.yaml")):
        index[path.stem] = path
        for alias in _header_aliases(path.read_text()):
            index.setdefault(alias, path)
    return index


@lru_cache(maxsize=1)
def hf_id_index() -> dict[str, Path]:
    """Every profile's Hugging Face repo id, lower-cased -> its profile file (header scan)."""
    index: dict[str, Path] = {}
    for path in sorted(profiles_dir().glob("*.yaml")):
        hf_id = _header_value(path.read_text(), "hf_id")
        if hf_id:
            index.setdefault(hf_id.lower(), path)
    return index


def profile_for_hf_id(repo_id: str) -> str | None:
    """The bundled profile name whose hf_id is `repo_id` (case-insensitive), or None."""
    path = hf_id_index().get(repo_id.lower())
    return path.stem if path else None


def model_names() -> list[str]:
    return sorted(p.stem for p in profiles_dir().glob("*.yaml"))


@lru_cache(maxsize=64)
def model_profile(name: str) -> dict[str, Any]:
    """The raw profile dict (name, hf_id, aliases, source, config, ...) of a bundled model, by name,
    alias or hf_id."""
    key = name.lower()
    index = model_index()
    path = index.get(key)
    if path is None and "/" in key:
        path = hf_id_index().get(key.partition("@")[0])
    if path is None:
        raise UnknownNameError("model", name, index.keys())
    data = _read_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise ConfigError(f"{path}: a model profile needs a 'config' mapping")
    _check_header(path, data)
    return data


def _check_header(path: Path, data: dict[str, Any]) -> None:
    """The profile's own keys have the types kvplan prints and indexes them by ($KVPLAN_DATA may
    point at a user's copy): a list where a name belongs is bad input, not a table cell."""
    for key in ("name", "hf_id", "source", "notes", "quantization"):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{path}: '{key}' must be a non-empty string, got {repr(value)[:60]}")
    aliases = data.get("aliases")
    if aliases is not None and (
        not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases)
    ):
        raise ConfigError(f"{path}: 'aliases' must be a list of names, got {repr(aliases)[:60]}")


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for a path, or one with a NUL
        return False


def _resolve(name_or_path: str) -> tuple[str, Any]:
    """What `--model` names, in the module doc's order: ("profile", profile name), ("path", Path)
    or ("hub", HubModel). Unknown names raise UnknownNameError; unresolved repo ids list what was tried."""
    if name_or_path.lower() in model_index():
        return "profile", name_or_path
    candidate = Path(name_or_path).expanduser()
    if _exists(candidate):
        return "path", candidate
    from kvplan.spec.hub import resolve_repo, split_repo_id

    repo = split_repo_id(name_or_path)
    if repo is not None:
        profile = profile_for_hf_id(repo[0])
        if profile is not None:
            return "profile", profile
        return "hub", resolve_repo(name_or_path, *repo)
    if os.sep in name_or_path or "/" in name_or_path or name_or_path.endswith(".json"):
        return "path", candidate  # spec_from_path says "no config.json found"
    raise UnknownNameError("model", name_or_path, model_index().keys())


def model_config(name_or_path: str) -> dict[str, Any]:
    """The config.json dict behind `--model`: a bundled profile, a Hugging Face repo id (cache or
    Hub), a config.json path or a model directory."""
    kind, target = _resolve(name_or_path)
    if kind == "profile":
        return dict(model_profile(target)["config"])
    if kind == "hub":
        return dict(target.config)
    return load_config_json(target / "config.json" if target.is_dir() else target)


def load_model(name_or_path: str, overrides: Mapping[str, Any] | None = None) -> ModelSpec:
    """A bundled profile name or alias, a Hugging Face repo id, a local model directory or a
    config.json path (see the module doc); `overrides` (config.json keys) are merged over its config
    and the spec rebuilt."""
    spec = _load_model(name_or_path)
    if not overrides:
        return spec
    merged = {**spec.config, **overrides}
    return spec_from_config(
        merged, spec.name, where=f"{name_or_path} with overrides", hf_id=spec.hf_id, source=spec.source
    )


def _load_model(name_or_path: str) -> ModelSpec:
    kind, target = _resolve(name_or_path)
    if kind == "path":
        return spec_from_path(target)
    if kind == "hub":
        name = target.repo_id + (f"@{target.revision}" if target.revision else "")
        return spec_from_config(target.config, name, where=str(target.config_path), hf_id=target.repo_id,
                                source=str(target.config_path), checkpoint_weights_bytes=target.weights_bytes)
    return _profile_spec(target)


def _profile_spec(name: str) -> ModelSpec:
    prof = model_profile(name)
    spec = spec_from_config(
        prof["config"], str(prof.get("name", name)), where=f"profile {prof.get('name', name)}",
        hf_id=prof.get("hf_id"), source=str(prof.get("source", "")), aliases=tuple(prof.get("aliases") or ()),
        checkpoint_weights_bytes=prof.get("weights_bytes"),
    )
    if prof.get("quantization") and spec.quant.method == "none":
        # the stored config lacks its quantization_config; the profile names the checkpoint's scheme
        from dataclasses import replace

        from kvplan.spec.quant import make_quant

        spec = replace(spec, quant=make_quant(str(prof["quantization"])))
    return spec
