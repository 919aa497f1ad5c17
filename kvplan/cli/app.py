"""The typer apps the commands attach to (the commands: the other modules of kvplan.cli)."""
from __future__ import annotations

from typing import Annotated, Any

import typer
import typer.core


def _flag_type(self: typer.core.TyperOption, ctx: Any) -> str | None:
    """No `<bool>` after a flag in --help (--help's own included): a flag takes no value."""
    return None if self.is_flag else _option_type(self, ctx)


_option_type = typer.core.TyperOption.display_type_rich
typer.core.TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]

# add_completion: `kvplan --install-completion` / `--show-completion` (bash, zsh, fish, PowerShell)
app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Plan and prove KV-cache memory for LLM serving.")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"kvplan {version('kvplan')}")
        except PackageNotFoundError:
            typer.echo("kvplan (not installed: running from a source tree)")
        raise typer.Exit()


@app.callback()
def _options(
    _: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True,
                                    help="Print kvplan's version and exit.", metavar="")] = False,
) -> None:
    """Plan and prove KV-cache memory for LLM serving."""
profiles_app = typer.Typer(add_completion=False, help="Bundled model profiles.", invoke_without_command=True)
app.add_typer(profiles_app, name="profiles")
baseline_app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Stored baselines that `kvplan gate` compares with."
)
app.add_typer(baseline_app, name="baseline")


LOG_WIDTH = 200  # columns of a table written to a file or a CI log: wide enough that no cell is cut


def make_console(*, stderr: bool = False):
    """The console every command prints with: the terminal's width, or, when stdout is not a
    terminal (a CI log, a pipe), LOG_WIDTH unless COLUMNS says otherwise (rich's own default, 80,
    cut cells such as `num_gpu_blo…`)."""
    import os
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout  # stderr: the tables of a command whose stdout is --json
    tty = hasattr(stream, "isatty") and stream.isatty()
    return Console(width=None if tty or os.environ.get("COLUMNS") else LOG_WIDTH, stderr=stderr)


def json_safe(value: object) -> object:
    """NaN and infinities as null (JSON has no spelling for them), through dicts, lists and tuples."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
