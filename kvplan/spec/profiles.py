"""The bundled catalog: `kvplan/data/models/*.yaml` (and `gpus.yaml`, read by `gpu.py`).

Loading is lazy and cached; `kvplan estimate` reads one small YAML file per call.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from kvplan.errors import ConfigError, UnknownNameError
from kvplan.spec.catalog_files import bundled_dir
from kvplan.spec.model import ModelSpec, load_config_json, spec_from_config, spec_from_path


def profiles_dir() -> Path:
    """The bundled data folder holding `models/` and `gpus.yaml`."""
    return bundled_dir()


def _read_yaml(path: Path) -> Any:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader when libyaml is there
    try:
        return yaml.load(path.read_text(), Loader=loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML ({exc})") from None


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


@lru_cache(maxsize=1)
def model_index() -> dict[str, Path]:
    """Every canonical name and alias -> its profile file (header scan: no YAML parse per file)."""
    index: dict[str, Path] = {}
    for path in sorted((profiles_dir() / "models").glob("*.yaml")):
        index[path.stem] = path
        for alias in _header_aliases(path.read_text()):
            index.setdefault(alias, path)
    return index


def model_names() -> list[str]:
    return sorted(p.stem for p in (profiles_dir() / "models").glob("*.yaml"))


@lru_cache(maxsize=64)
def model_profile(name: str) -> dict[str, Any]:
    """The raw profile dict (name, hf_id, aliases, source, config, ...) of a bundled model."""
    key = name.lower()
    index = model_index()
    if key not in index:
        raise UnknownNameError("model", name, index.keys())
    data = _read_yaml(index[key])
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise ConfigError(f"{index[key]}: a model profile needs a 'config' mapping")
    return data


def model_config(name_or_path: str) -> dict[str, Any]:
    """The config.json dict behind a bundled profile, a config.json path or a model directory."""
    if name_or_path.lower() in model_index():
        return dict(model_profile(name_or_path)["config"])
    path = Path(name_or_path).expanduser()
    return load_config_json(path / "config.json" if path.is_dir() else path)


def load_model(name_or_path: str, overrides: Mapping[str, Any] | None = None) -> ModelSpec:
    """A bundled profile name or alias, a config.json path, or a local model directory; `overrides`
    (config.json keys) are merged over its config and the spec rebuilt."""
    spec = _load_model(name_or_path)
    if not overrides:
        return spec
    merged = {**model_config(name_or_path), **overrides}
    return spec_from_config(merged, spec.name, where=f"{name_or_path} with overrides", hf_id=spec.hf_id, source=spec.source)


def _load_model(name_or_path: str) -> ModelSpec:
    candidate = Path(name_or_path).expanduser()
    looks_like_path = os.sep in name_or_path or name_or_path.endswith(".json") or candidate.exists()
    if looks_like_path and name_or_path.lower() not in model_index():
        return spec_from_path(candidate)
    prof = model_profile(name_or_path)
    spec = spec_from_config(
        prof["config"], str(prof.get("name", name_or_path)), where=f"profile {prof.get('name', name_or_path)}",
        hf_id=prof.get("hf_id"), source=str(prof.get("source", "")), aliases=tuple(prof.get("aliases") or ()),
        checkpoint_weights_bytes=prof.get("weights_bytes"),
    )
    if prof.get("quantization") and spec.quant.method == "none":
        # the stored config lacks its quantization_config; the profile names the checkpoint's scheme
        from dataclasses import replace

        from kvplan.spec.quant import make_quant

        spec = replace(spec, quant=make_quant(str(prof["quantization"])))
    return spec
