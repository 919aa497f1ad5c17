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
                                    help="Print kvplan's version and exit.")] = False,
) -> None:
    """Plan and prove KV-cache memory for LLM serving."""
profiles_app = typer.Typer(add_completion=False, help="Bundled model profiles.", invoke_without_command=True)
app.add_typer(profiles_app, name="profiles")
baseline_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Stored baselines that `kvplan gate` compares with.")
app.add_typer(baseline_app, name="baseline")


def make_console():
    from rich.console import Console

    return Console()
