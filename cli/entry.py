"""The console script's entry point: `runjournal --version` answered before click loads.

`import click` alone costs about four times the interpreter's own start-up, and
`--version` needs nothing of it: when it is the only argument, the version is printed
here exactly as click's `version_option` prints it (a test compares the two); every
other command line goes to the command group (cli/main.py). See docs/performance.md
"Start-up".
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from runjournal import __version__

        sys.stdout.write(f"runjournal, version {__version__}\n")
        sys.stdout.flush()
        sys.exit(0)
    from runjournal.cli.main import main as group

    group()


if __name__ == "__main__":
    main()
