"""The `kvplan` command line. Commands stay thin; heavy modules (torch, transformers) are
imported inside the commands that need them so `kvplan --help` and `kvplan estimate` stay fast.

Modules: app.py (the typer apps), options.py (flags shared by commands, typed once),
server_flags.py (the served model and GPU from those flags), plan_commands.py (estimate, sweep,
gpus, profiles), perf_commands.py (predict, plan), reuse_commands.py (conversations and routers for
predict; plan-sessions), stress_command.py (stress: run, print, save),
prove_commands.py (serve, scenarios, calibrate, report), gate_commands.py (gate, baseline update).

Every user mistake is a `KvplanError` (or a click usage error): one line on stderr, exit code 2,
no traceback unless `--debug`.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Any

import typer

from kvplan.cli import gate_commands, perf_commands, plan_commands, prove_commands, reuse_commands, stress_command  # noqa: F401  (they register the commands)
from kvplan.cli.app import app
from kvplan.errors import KvplanError

MAX_ERROR_CHARS = 1000
INTERNAL_ERROR_EXIT = 70  # EX_SOFTWARE: not 1 (a failed gate or failed requests) and not 2 (bad input)


def _bounded(message: str) -> str:
    """One line of at most MAX_ERROR_CHARS: messages quote the user's values, which may be huge."""
    line = " ".join(message.split())
    return line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 3] + "..."


class _ClosedPipeTolerant:
    """stdout that outlives its reader (`kvplan estimate ... | head`): once the pipe is closed the
    rest of the output goes nowhere and the command ends with its own exit code (click would exit 1,
    the gate's "regression" code)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._closed = False

    def _drop(self) -> None:
        self._closed = True
        try:  # the interpreter's own final flush of fd 1 must not raise either
            fd = self._stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def write(self, text: str) -> int:
        if not self._closed:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self._closed:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._drop()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


ENGINE_MODULES = frozenset({"torch", "transformers"})  # the [engine] extra (pyproject.toml)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning user mistakes into one line and exit code 2."""
    if not isinstance(sys.stdout, _ClosedPipeTolerant):
        sys.stdout = _ClosedPipeTolerant(sys.stdout)
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    if debug:
        args.remove("--debug")
    command = typer.main.get_command(app)
    try:
        rc = command.main(args=args, prog_name="kvplan", standalone_mode=False)
    except KvplanError as exc:
        if debug:
            raise
        typer.echo(f"kvplan: error: {_bounded(str(exc))}", err=True)
        _exit(exc.exit_code, process=argv is None)
    except typer.Abort:
        typer.echo("kvplan: aborted", err=True)
        _exit(130, process=argv is None)
    except typer.TyperException as exc:  # usage errors: bad option value, missing option, unknown command
        if debug:
            raise
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        typer.echo(f"kvplan: error: {_bounded(message)}", err=True)
        sys.exit(2)
    except ModuleNotFoundError as exc:
        if debug or exc.name not in ENGINE_MODULES:
            raise
        typer.echo(f"kvplan: error: this command runs the bundled engine, which needs {exc.name} (not installed): "
                   "pip install 'kvplan[engine]' (estimate, predict, plan, sweep, gate, report and stress --target "
                   "run without it)", err=True)
        _exit(2, process=argv is None)
    except MemoryError:
        if debug:
            raise
        typer.echo("kvplan: error: out of memory: the command needs more than this process may take (ulimit -v, "
                   "the machine's free memory); make the run smaller (num_requests, --num-prompts, the dataset)",
                   err=True)
        _exit(2, process=argv is None, hard=True)  # no interpreter shutdown: its finalizers would fail again
    except Exception as exc:  # noqa: BLE001 - a bug, not the user's input: one line, never exit 1 or 2
        if debug:
            raise
        typer.echo(f"kvplan: internal error: {type(exc).__name__}: {_bounded(str(exc))} "
                   "(rerun with --debug for the traceback, and please report it)", err=True)
        sys.exit(INTERNAL_ERROR_EXIT)
    _exit(rc if isinstance(rc, int) else 0, process=argv is None)


def _exit(code: int, *, process: bool, hard: bool = False) -> None:
    """Exit with `code`. After a Ctrl-C (130), CPython may still end the process by SIGINT (exit -2):
    a KeyboardInterrupt that passed through C code run with PyRun_* (torch's start-up does) sets a
    process-wide "unhandled" flag that catching it does not clear. So 130 ends here, files and
    streams flushed (every result is written before this point). `process`: main() runs as the
    program (not called in-process with its arguments, as tests do). Any other code: the command has
    finished and written what it writes, so a Ctrl-C from here on (while the interpreter shuts down)
    changes nothing; without this it could still end a finished run by SIGINT (exit -2). `hard`: end
    here too (after a MemoryError the interpreter's shutdown would fail again and print tracebacks)."""
    if process:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if (code == 130 or hard) and process:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    sys.exit(code)
