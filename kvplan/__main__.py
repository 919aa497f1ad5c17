"""`python -m kvplan` and the `kvplan` command. Importing the CLI takes a few hundred ms: a Ctrl-C
then is exit 130 with one line, as at any later moment (never a KeyboardInterrupt traceback)."""
import os
import signal
import sys


def run() -> None:
    try:
        from kvplan.cli import main

        main()
    except KeyboardInterrupt:  # main turns one inside a command into 130 itself; this is before or around it
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while exiting changes nothing
        sys.stderr.write("kvplan: interrupted\n")
        sys.stderr.flush()
        os._exit(130)  # not sys.exit: CPython may still die by SIGINT (see kvplan.cli._exit)


if __name__ == "__main__":
    run()
