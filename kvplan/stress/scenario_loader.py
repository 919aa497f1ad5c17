"""Reading scenario files: YAML with duplicate keys refused, and every validation problem turned
into one `KvplanError` line naming the file, the field path, the bad value and the choices."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kvplan.errors import KvplanError, read_user_file
from kvplan.spec.catalog_files import scenarios_dir
from kvplan.stress.scenario import Scenario, check_against_model
from kvplan.validation import FieldIssue, format_validation_error, number_problem, path_text, short_repr

# A scenario is a page of YAML: these bounds refuse alias bombs ("billion laughs") and deep nesting
# before anything is built, at a cost proportional to the file, not to its expansion.
MAX_SCENARIO_BYTES = 1 << 20
MAX_ALIASES = 200
MAX_DEPTH = 32
MAX_EXPANDED_NODES = 200_000


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML keeps the last one silently), more than
    MAX_ALIASES aliases and nesting deeper than MAX_DEPTH."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.num_aliases = 0
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.num_aliases += 1
            if self.num_aliases > MAX_ALIASES:
                raise yaml.composer.ComposerError(
                    None, None, f"more than {MAX_ALIASES} aliases", self.peek_event().start_mark
                )
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)) and key is not None:  # `? [a, b]`: a list as a key
                raise yaml.constructor.ConstructorError(None, None, f"a {type(key).__name__} as a mapping key "
                                                        "(keys are names)", key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _expanded_nodes(node: yaml.Node, memo: dict[int, int], active: set[int]) -> int:
    """Nodes in the document once every alias is expanded (shared nodes counted once each time
    they are reached, computed once thanks to `memo`)."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in active:
        raise yaml.composer.ComposerError(None, None, "a recursive alias", node.start_mark)
    active.add(key)
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    total = 1 + sum(_expanded_nodes(c, memo, active) for c in children)
    active.discard(key)
    memo[key] = total
    return total


def load_yaml(text: str) -> Any:
    """Parse one YAML document within the bounds above (raises `yaml.YAMLError`)."""
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_nodes(node, {}, set())
        if size > MAX_EXPANDED_NODES:
            raise yaml.composer.ComposerError(None, None, f"{size:,} values once aliases are expanded "
                                              f"(the limit is {MAX_EXPANDED_NODES:,})", node.start_mark)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate a scenario mapping (as read from YAML, or `Scenario.to_dict()`), model checks included."""
    if not isinstance(data, dict):
        raise KvplanError(
            f"{source}: a scenario must be a mapping of keys (name, model, workload, ...), got {short_repr(data)}"
        )
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
    return {p.stem: p for p in sorted(scenarios_dir().glob("*.yaml"))}


def scenario_file(name_or_path: str | Path) -> Path:
    """A path to a scenario file, or a bundled scenario's name (`mixed`, `mixed.yaml`; also
    `scenarios/mixed.yaml`, the name it had in the source tree, when no such file is here)."""
    path = Path(name_or_path).expanduser()
    try:
        if path.exists():
            return path
    except (OSError, ValueError):  # a name too long for the filesystem, a NUL byte: not a file
        pass
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
    text = read_user_file(p, "scenario", max_bytes=MAX_SCENARIO_BYTES)
    try:
        data = load_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark else str(p)
        raise KvplanError(f"{at}: invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise KvplanError(f"{p}: invalid YAML: {str(exc).splitlines()[0]}") from None
    except ValueError as exc:  # an integer of more than 4,300 digits (Python's conversion limit)
        raise KvplanError(f"{p}: {number_problem(exc)}") from None
    _dataset_beside(data, p)
    return parse_scenario(data, str(p))


def _dataset_beside(data: Any, scenario_path: Path) -> None:
    """A dataset or conversations path written relative in a scenario file is relative to that
    file's folder (an hf dataset's path with nothing there beside it is a repo id)."""
    workload = data.get("workload") if isinstance(data, dict) else None
    for key in ("dataset", "conversations"):
        dataset = workload.get(key) if isinstance(workload, dict) else None
        if isinstance(dataset, dict) and isinstance(dataset.get("path"), str) and dataset["path"]:
            path = Path(dataset["path"]).expanduser()
            beside = scenario_path.parent.absolute() / path
            if not path.is_absolute() and (dataset.get("name") != "hf" or beside.exists()):  # hf: else a repo id
                dataset["path"] = str(beside)
