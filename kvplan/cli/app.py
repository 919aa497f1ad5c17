"""The typer apps the commands attach to (the commands: the other modules of kvplan.cli)."""
from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
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
baseline_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Stored baselines that `kvplan gate` compares with.")
app.add_typer(baseline_app, name="baseline")


LOG_WIDTH = 200  # columns of a table written to a file or a CI log: wide enough that no cell is cut


def make_console():
    """The console every command prints with: the terminal's width, or, when stdout is not a
    terminal (a CI log, a pipe), LOG_WIDTH unless COLUMNS says otherwise (rich's own default, 80,
    cut cells such as `num_gpu_blo…`)."""
    import os
    import sys

    from rich.console import Console

    tty = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
    return Console(width=None if tty or os.environ.get("COLUMNS") else LOG_WIDTH)
