"""Run `kvplan stress` in forked child processes and kill them (test_crash_safety.py).

Imports kvplan, the engine and torch once, then forks one child per attempt, so that each attempt
costs the run, not the ~10 s of imports, and the kills can be spread over the whole run:

    crash_helper.py kill SCENARIO WORK OLD_DIR FRACTIONS...
        one complete run first (its duration T and its files), then for each fraction f: restore
        WORK/out from OLD_DIR, fork `kvplan stress -s SCENARIO --out WORK/out --force`, SIGKILL it
        after f x T, and copy WORK/out (hidden files included) to WORK/after-<i>
    crash_helper.py sigint SCENARIO WORK
        a child that sends itself SIGINT (as Ctrl-C does) once 3 requests finished, and again while
        the partial result is being saved; its exit code goes to WORK/sigint.rc
    crash_helper.py write WORK DELAYS...
        a child rewriting two 8 MiB files with `files.write_files` in a loop, SIGKILLed after each delay

Prints one JSON line of what it did (the test checks the files, not this script).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path


def _child(argv: list[str], setup=None) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        if setup is not None:
            setup()
        from kvplan.cli import main

        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os._exit(code)


def _rc(status: int) -> int:
    return os.waitstatus_to_exitcode(status)


def kill(scenario: str, work: Path, old: Path, fractions: list[float]) -> dict:
    out = work / "out"
    argv = ["stress", "-s", scenario, "--out", str(out), "--force", "--no-progress"]

    def restore() -> None:
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(old, out)

    restore()
    start = time.monotonic()
    _, status = os.waitpid(_child(argv), 0)
    full_s = time.monotonic() - start
    shutil.copytree(out, work / "complete")
    attempts = []
    for i, fraction in enumerate(fractions):
        restore()
        pid = _child(argv)
        time.sleep(fraction * full_s)
        os.kill(pid, signal.SIGKILL)
        _, st = os.waitpid(pid, 0)
        attempts.append({"fraction": fraction, "rc": _rc(st)})
        shutil.copytree(out, work / f"after-{i}")
    return {"complete_rc": _rc(status), "full_s": full_s, "attempts": attempts}


def sigint(scenario: str, work: Path) -> dict:
    def setup() -> None:
        import kvplan.report.html as html
        import kvplan.stress.targets.engine_target as target

        run_engine, render = target.run_engine, html.render_report

        def run(engine, sc, requests, on_progress=None, **kw):  # Ctrl-C once 3 requests are done
            sent = []

            def progress(n: int) -> None:  # >= 3: on a busy machine one step may finish several at once
                if n >= 3 and not sent:
                    sent.append(n)
                    os.kill(os.getpid(), signal.SIGINT)
            return run_engine(engine, sc, requests, on_progress=progress, **kw)

        def render_report(results):  # a second Ctrl-C while the partial result is saved
            os.kill(os.getpid(), signal.SIGINT)
            return render(results)

        target.run_engine = run
        html.render_report = render_report

    argv = ["stress", "-s", scenario, "--out", str(work / "out"), "--force", "--no-progress"]
    _, status = os.waitpid(_child(argv, setup), 0)
    return {"rc": _rc(status)}


def write(work: Path, delays: list[float]) -> dict:
    from kvplan.files import write_files

    targets = [work / "a.bin", work / "b.bin"]
    size = 8 * 2**20
    write_files({t: bytes([0]) * size for t in targets})  # generation 0
    attempts = []
    for delay in delays:
        pid = os.fork()
        if not pid:
            generation = 1
            while True:  # every write: both files, all bytes one generation
                write_files({t: bytes([generation % 256]) * size for t in targets})
                generation += 1
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        attempts.append({"delay": delay, "entries": sorted(p.name for p in work.iterdir())})
        shutil.copytree(
            work, work.parent / f"{work.name}-after-{len(attempts) - 1}", ignore=shutil.ignore_patterns("*-after-*")
        )
    write_files({t: b"done" for t in targets})  # the next write removes the dead writers' temp files
    return {"attempts": attempts, "final": sorted(p.name for p in work.iterdir())}


if __name__ == "__main__":
    import kvplan.cli  # noqa: F401  # imports paid once, before any fork
    import kvplan.engine.llm_engine  # noqa: F401
    import kvplan.report.html  # noqa: F401
    import kvplan.stress.targets.engine_target  # noqa: F401

    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "kill":
        report = kill(args[0], Path(args[1]), Path(args[2]), [float(a) for a in args[3:]])
    elif mode == "sigint":
        report = sigint(args[0], Path(args[1]))
    else:
        report = write(Path(args[0]), [float(a) for a in args[1:]])
    print(json.dumps(report))
