"""Project discovery trusts only what you or root own and only you or root may replace
(issue #27 defect 10; docs/configuration.md "Finding the project").

Another user could plant a pipeline file, or a symlink to a root-owned one, where your
commands look for their project, and redirect them to another project's roots. As an
unprivileged user (`nobody`), a command started below such a planted file ignores it
with one line saying why, and uses the default roots instead; a pipeline file of your
own, or reached through root's symlink, is still followed.

The tests run as root so that files can be given to other users; the command then runs
with its user and groups dropped to `nobody` (interpreter and packages must be readable
by it). Skipped, with the reason, where that is impossible.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.console import CEILING

NOBODY = 65534
MALLORY = 65533  # another unprivileged user: a uid is all a file needs
SITE = sysconfig.get_paths()["purelib"]
BOOT = (
    "import site, sys; site.addsitedir(sys.argv.pop(1)); "
    "from runjournal.cli.entry import main; sys.argv[0] = 'runjournal'; sys.exit(main())"
)
PIPELINE = 'name = "p"\n[[steps]]\nid = "a"\nmodule = "builtin.terms"\n'


def _drop() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _interpreter(base: Path) -> str | None:
    """A Python that `nobody` can run and that imports this runjournal, or None."""
    for python in (sys.executable, "/usr/bin/python3"):
        try:
            proc = subprocess.run(
                [python, "-c", BOOT, SITE, "--version"],
                cwd=base,
                env={"HOME": str(base), "PATH": os.environ.get("PATH", "")},
                preexec_fn=_drop,
                capture_output=True,
                text=True,
                timeout=120,
            )
        except OSError:
            continue
        if proc.returncode == 0 and "runjournal" in proc.stdout:
            return python
    return None


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory `nobody` can reach (pytest's own temp dirs are root's, 0700)."""
    if not hasattr(os, "getuid") or os.getuid() != 0:
        pytest.skip("needs root: to give files to other users and to run as nobody")
    path = Path(tempfile.mkdtemp(prefix="rj-trust-"))
    path.chmod(0o755)
    try:
        yield path.resolve()
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def as_nobody(base: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    python = _interpreter(base)
    if python is None:
        pytest.skip("no Python interpreter that user nobody can run imports this runjournal")
    home = base / "home"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)

    def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "PATH": os.environ.get("PATH", ""),
            CEILING: str(base),  # the walk never looks above the test's directory
        }
        return subprocess.run(
            [python, "-c", BOOT, SITE, *args],
            cwd=cwd,
            env=env,
            preexec_fn=_drop,
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run


def _dir(path: Path, uid: int = 0, mode: int = 0o755) -> Path:
    path.mkdir(parents=True)
    os.chown(path, uid, uid)
    path.chmod(mode)
    return path


def _pipeline(path: Path, output_root: str, uid: int = 0) -> Path:
    path.write_text(PIPELINE + f'[runjournal]\noutput_root = "{output_root}"\n')
    os.chown(path, uid, uid)
    path.chmod(0o644)
    return path


def _link(path: Path, target: Path, uid: int) -> Path:
    path.symlink_to(target)
    os.lchown(path, uid, uid)
    return path


def _victim(base: Path) -> tuple[Path, str]:
    """Root's pipeline of another project, whose roots the planted files point to."""
    victim = _dir(base / "victim")
    return _pipeline(victim / "pipeline.toml", str(victim / "theirs")), str(victim / "theirs")


def _planted(base: Path, case: str) -> tuple[Path, Path, str]:
    """(where the command starts, the planted file, why it is ignored)."""
    target, _ = _victim(base)
    if case == "symlink in a shared directory":
        shared = _dir(base / "shared", 0, 0o1777)
        planted = _link(shared / "pipeline.toml", target, MALLORY)
        why = f"{shared} is writable by group or others"
    elif case == "another user's symlink":
        hall = _dir(base / "hall")
        planted = _link(hall / "pipeline.toml", target, MALLORY)
        why = f"the symlink {planted} is owned by another user (uid {MALLORY})"
    elif case == "a file in another user's directory":
        theirs = _dir(base / "theirs", MALLORY, 0o777)
        planted = _pipeline(theirs / "pipeline.toml", str(base / "victim" / "theirs"), MALLORY)
        why = f"{theirs} is owned by another user (uid {MALLORY})"
    else:  # a chain: root's symlink to another user's symlink to root's file
        hall = _dir(base / "hall")
        theirs = _dir(base / "theirs", MALLORY)
        middle = _link(theirs / "next.toml", target, MALLORY)
        planted = _link(hall / "pipeline.toml", middle, 0)
        why = f"{theirs} is owned by another user (uid {MALLORY})"
    start = _dir(planted.parent / "me", NOBODY)
    return start, planted, why


CASES = [
    "symlink in a shared directory",
    "another user's symlink",
    "a file in another user's directory",
    "a chain through another user's symlink",
]


@pytest.mark.parametrize("case", CASES)
def test_a_planted_pipeline_is_ignored_with_one_line(
    base: Path, as_nobody: Callable[..., subprocess.CompletedProcess[str]], case: str
) -> None:
    start, planted, why = _planted(base, case)
    proc = as_nobody(start, "runs", "list")
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert warnings == [f"runjournal: warning: ignoring pipeline file {planted}: {why}"]
    # the default roots, not the other project's
    assert f"no journal at {start}/runs/journal.sqlite3" in proc.stderr, proc.stderr
    assert str(base / "victim" / "theirs") not in proc.stdout + proc.stderr
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 2


@pytest.mark.parametrize("how", ["own file", "root's symlink in your directory"])
def test_your_own_and_roots_are_still_followed(
    base: Path, as_nobody: Callable[..., subprocess.CompletedProcess[str]], how: str
) -> None:
    own = _dir(base / "own", NOBODY)
    if how == "own file":
        _pipeline(own / "pipeline.toml", "mine", NOBODY)
        expected = own / "mine"
    else:
        target, theirs = _victim(base)
        _link(own / "pipeline.toml", target, 0)
        expected = Path(theirs)
    start = _dir(own / "sub", NOBODY)
    proc = as_nobody(start, "runs", "list")
    assert proc.stderr.splitlines() == [
        f"runjournal: error: no journal at {expected}/journal.sqlite3 (use --journal or "
        "--output-root, or run the command in the pipeline's directory)"
    ]
