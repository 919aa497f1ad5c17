"""Reading scenario files: YAML with duplicate keys refused, and every validation problem turned
into one `KvplanError` line naming the file, the field path, the bad value and the choices."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from kvplan.errors import KvplanError, read_user_file
from kvplan.stress.scenario import FieldIssue, Scenario, _short, check_against_model

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


def _path_text(loc: tuple[str | int, ...]) -> str:
    out = ""
    for seg in loc:
        out += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if out else str(seg))
    return out or "(top level)"


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model class that holds the field at `loc` (for listing valid keys)."""
    import typing

    cls: Any = Scenario
    for seg in loc:
        if isinstance(seg, int) or not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            continue
        if seg not in cls.model_fields:
            return None
        ann = cls.model_fields[seg].annotation
        while typing.get_args(ann):  # unwrap Optional / list / dict down to a model class
            ann = next((a for a in typing.get_args(ann) if isinstance(a, type) and issubclass(a, BaseModel)),
                       typing.get_args(ann)[-1])
        cls = ann
    return cls if isinstance(cls, type) and issubclass(cls, BaseModel) else None


_TYPE_WORDS = {"model_type": "a mapping", "model_attributes_type": "a mapping", "dict_type": "a mapping",
               "list_type": "a list", "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
               "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
               "bool_parsing": "true or false", "string_type": "a string"}


def format_validation_error(where: str, exc: ValidationError) -> str:
    """One line for the first error of a pydantic ValidationError (shared with report/result.py)."""
    errors = exc.errors(include_url=False)
    err = errors[0]
    loc = tuple(err["loc"])
    kind = err["type"]
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, FieldIssue):
        loc, text = loc + cause.subpath, cause.message
    elif kind == "missing":
        text = "is required"
    elif kind == "extra_forbidden":
        holder = _model_at(loc[:-1])
        valid = f"; valid keys: {', '.join(holder.model_fields)}" if holder else ""
        text = f"unknown key {loc[-1]!r}{valid}"
    elif kind == "literal_error":
        text = f"{_short(err['input'])} is not a valid choice; choices: {err['ctx']['expected']}"
    elif kind in _TYPE_WORDS:
        text = f"must be {_TYPE_WORDS[kind]}, got {_short(err['input'])}"
    else:
        text = f"{err['msg'].removeprefix('Value error, ').replace('Input should be', 'must be')}, got {_short(err['input'])}"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {_path_text(loc)}: {text}{more}".replace("\n", " ")


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate a scenario mapping (as read from YAML, or `Scenario.to_dict()`), model checks included."""
    if not isinstance(data, dict):
        raise KvplanError(f"{source}: a scenario must be a mapping of keys (name, model, workload, ...), got {_short(data)}")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise KvplanError(format_validation_error(source, exc)) from None
    try:
        check_against_model(scenario)
    except FieldIssue as issue:
        raise KvplanError(f"{source}: {_path_text(issue.subpath)}: {issue.message}".replace("\n", " ")) from None
    return scenario


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML file; any problem is one `KvplanError` line."""
    p = Path(path)
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
