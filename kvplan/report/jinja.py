"""Rendering the HTML templates: jinja2, autoescaped (names in results are user text), strict."""
from __future__ import annotations

from pathlib import Path
from typing import Any

TEMPLATES = Path(__file__).resolve().parent / "templates"


def render_template(name: str, **context: Any) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template(name).render(**context)
