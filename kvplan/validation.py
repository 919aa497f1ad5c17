"""Pydantic at the edges: one readable line for a validation problem.

Scenario files, result files and the engine configuration are validated by pydantic; a validator
that wants to name a sub-field raises `FieldIssue`, and `format_validation_error` turns the first
error into `WHERE: field.path[2].name: what is wrong, got VALUE`.
"""
from __future__ import annotations

import reprlib
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class StrictModel(BaseModel):
    """A file's section: unknown keys refused, no coercion, immutable.

    strict: YAML `"5"` is not silently an int, and `true` is not 1; no inf/nan: `.inf` in YAML is a
    float, and an infinite ramp or duration never ends."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class FieldIssue(ValueError):
    """A validator's complaint about a sub-field: `subpath` is appended to pydantic's location."""

    def __init__(self, subpath: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.subpath = subpath
        self.message = message


_REPR = reprlib.Repr()  # attributes, not keywords: Python 3.10 and 3.11 take none
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple, _REPR.maxset = 3, 4, 4, 4, 4
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 50, 50, 40


def short_repr(value: Any) -> str:
    """A bounded excerpt of `value` (at most 60 characters, computed without rendering the whole
    value: a message names the bad value, never a whole, possibly huge, document)."""
    text = _REPR.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def number_problem(exc: ValueError) -> str:
    """One phrase for a ValueError from parsing a file: Python's 4,300-digit limit on integer
    conversion said plainly, else the parser's own first line."""
    text = str(exc)
    if "integer string conversion" in text or "int_max_str_digits" in text:
        return "a number has more than 4,300 digits; no setting kvplan reads is that large"
    return text.splitlines()[0][:200] if text else type(exc).__name__


def path_text(loc: tuple[str | int, ...]) -> str:
    """('workload', 'classes', 1, 'name') -> 'workload.classes[1].name'."""
    out = ""
    for seg in loc:
        out += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if out else str(seg))
    return out or "(top level)"


def _fields_of(cls: Any) -> dict[str, Any]:
    """Field annotations of a pydantic model or a pydantic dataclass (for listing valid keys)."""
    if isinstance(cls, type) and issubclass(cls, BaseModel):
        return {k: f.annotation for k, f in cls.model_fields.items()}
    fields = getattr(cls, "__pydantic_fields__", None)
    return {k: f.annotation for k, f in fields.items()} if fields else {}


def _model_at(root: Any, loc: tuple[str | int, ...]) -> Any:
    """The model class that holds the field at `loc` below `root`, or None."""
    cls: Any = root
    for seg in loc:
        fields = _fields_of(cls)
        if isinstance(seg, int) or not fields:
            continue
        if seg not in fields:
            return None
        ann = fields[seg]
        while typing.get_args(ann):  # unwrap Optional / list / dict down to a model class
            ann = next((a for a in typing.get_args(ann) if _fields_of(a)), typing.get_args(ann)[-1])
        cls = ann
    return cls if _fields_of(cls) else None


_TYPE_WORDS = {
    # pydantic's error types for "not a mapping": <what was expected>_type
    **{f"{expected}_type": "a mapping" for expected in ("model", "model_attributes", "dict", "dataclass")},
    "list_type": "a list",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
}


MAX_LISTED_ERRORS = 8  # of one file's problems, all on one line; past that, how many more


def format_validation_error(where: str, exc: ValidationError, root: Any = None) -> str:
    """One line listing every error of `exc` (up to MAX_LISTED_ERRORS), so a file is fixed in one
    go; `root` (the validated class) lets an unknown key list the valid ones."""
    errors = exc.errors(include_url=False)
    parts = [f"{path_text(loc)}: {text}" for loc, text in (error_text(e, root) for e in errors[:MAX_LISTED_ERRORS])]
    more = f"; and {len(errors) - MAX_LISTED_ERRORS} more" if len(errors) > MAX_LISTED_ERRORS else ""
    return f"{where}: {'; '.join(parts)}{more}".replace("\n", " ")


def first_error(exc: ValidationError, root: Any = None) -> tuple[tuple[str | int, ...], str]:
    """(field path, what is wrong) of the first error of `exc`."""
    return error_text(exc.errors(include_url=False)[0], root)


def error_text(err: Any, root: Any = None) -> tuple[tuple[str | int, ...], str]:
    """(field path, what is wrong) of one pydantic error."""
    loc = tuple(err["loc"])
    kind = err["type"]
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, FieldIssue):
        loc, text = loc + cause.subpath, cause.message
    elif kind == "missing":
        text = "is required"
    elif kind in ("extra_forbidden", "unexpected_keyword_argument"):
        holder = _model_at(root, loc[:-1]) if root is not None else None
        valid = f"; valid keys: {', '.join(_fields_of(holder))}" if holder else ""
        text = f"unknown key {loc[-1]!r}{valid}"
    elif kind == "literal_error":
        text = f"{short_repr(err['input'])} is not a valid choice; choices: {err['ctx']['expected']}"
    elif kind in _TYPE_WORDS:
        text = f"must be {_TYPE_WORDS[kind]}, got {short_repr(err['input'])}"
    else:
        msg = err["msg"].removeprefix("Value error, ").replace("Input should be", "must be")
        text = f"{msg}, got {short_repr(err['input'])}"
    return loc, text
