"""`python -m kvplan` and the `kvplan` command. Importing the CLI takes a few hundred ms: a Ctrl-C
then is exit 130 with one line, as at any later moment (never a KeyboardInterrupt traceback)."""
import sys


def run() -> None:
    try:
        from kvplan.cli import main

        main()
    except KeyboardInterrupt:  # main turns one inside a command into 130 itself; this is before or around it
        sys.stderr.write("kvplan: interrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    run()
