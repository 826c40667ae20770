"""The console script's entry point: `runjournal --version` answered before click loads.

`import click` alone costs about four times the interpreter's own start-up, and
`--version` needs nothing of it: when it is the only argument, the version is printed
here exactly as click's `version_option` prints it (a test compares the two); every
other command line goes to the command group (cli/main.py). See docs/performance.md
"Start-up".
"""

from __future__ import annotations

import gc
import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from runjournal import __version__

        sys.stdout.write(f"runjournal, version {__version__}\n")
        sys.stdout.flush()
        sys.exit(0)
    from runjournal.cli.main import main as group

    try:
        group()
    finally:
        # The command is done; what is left is the interpreter's teardown, whose full
        # collection walks every object the process holds to free what the process gives
        # back anyway: 0.1 to 0.25 s after a 1,000-call run, 0.03 s with them frozen
        # (docs/performance.md "Concurrency: `--jobs N` against an LLM endpoint").
        # Objects are still released and exit handlers still run.
        gc.freeze()


if __name__ == "__main__":
    main()
