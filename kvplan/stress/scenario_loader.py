"""Reading scenario files: YAML with duplicate keys refused, and every validation problem turned
into one `KvplanError` line naming the file, the field path, the bad value and the choices."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kvplan.errors import KvplanError, read_user_file
from kvplan.spec.catalog_files import bundled_dir
from kvplan.stress.scenario import Scenario, check_against_model
from kvplan.validation import FieldIssue, format_validation_error, path_text, short_repr


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate a scenario mapping (as read from YAML, or `Scenario.to_dict()`), model checks included."""
    if not isinstance(data, dict):
        raise KvplanError(f"{source}: a scenario must be a mapping of keys (name, model, workload, ...), got {short_repr(data)}")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise KvplanError(format_validation_error(source, exc, Scenario)) from None
    try:
        check_against_model(scenario)
    except FieldIssue as issue:
        raise KvplanError(f"{source}: {path_text(issue.subpath)}: {issue.message}".replace("\n", " ")) from None
    return scenario


def bundled_scenarios() -> dict[str, Path]:
    """Name -> file of every scenario shipped with kvplan."""
    return {p.stem: p for p in sorted((bundled_dir() / "scenarios").glob("*.yaml"))}


def scenario_file(name_or_path: str | Path) -> Path:
    """A path to a scenario file, or a bundled scenario's name (`mixed`, `mixed.yaml`; also
    `scenarios/mixed.yaml`, the name it had in the source tree, when no such file is here)."""
    path = Path(name_or_path).expanduser()
    if path.exists():
        return path
    bundled = bundled_scenarios()
    stem = path.name.removesuffix(".yaml").removesuffix(".yml")
    if stem in bundled and (path.parent == Path(".") or path.parent.name == "scenarios"):
        return bundled[stem]
    raise KvplanError(f"{name_or_path}: no such scenario file, and not a bundled scenario; bundled: "
                      f"{', '.join(bundled)} (`kvplan scenarios` lists them)")


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML file (a path or a bundled name); any problem is one
    `KvplanError` line."""
    p = scenario_file(path)
    text = read_user_file(p, "scenario")
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark else str(p)
        raise KvplanError(f"{at}: invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise KvplanError(f"{p}: invalid YAML: {str(exc).splitlines()[0]}") from None
    return parse_scenario(data, str(p))
