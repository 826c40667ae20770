"""Without the `otel` or `lineage` extra, `journal otel` and `journal lineage` say which
extra to install, in one line, exit 2 (docs/operations.md "Traces and lineage").

The packages are hidden by a directory first on PYTHONPATH whose `opentelemetry` and
`openlineage` packages fail to import, as they would when not installed.
"""

from __future__ import annotations

from pathlib import Path

from support.console import CLI

ONE_DOC = 'name = "one"\ninputs = ["doc.md"]\n[[steps]]\nid = "terms"\nmodule = "builtin.terms"\n'


def test_a_missing_extra_is_one_line_and_exit_2(cli: CLI, tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "doc.md").write_text("# One\n\nA **term** here.\n")
    (project / "pipeline.toml").write_text(ONE_DOC)
    where = ["--output-root", str(project / "out")]
    assert cli("run", str(project / "pipeline.toml"), *where).returncode == 0

    hidden = tmp_path / "hidden"
    for name in ("opentelemetry", "openlineage"):
        (hidden / name).mkdir(parents=True)
        (hidden / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError('no {name} here', name='{name}')\n"
        )
    env = {"PYTHONPATH": str(hidden)}
    for args, extra in (
        (["journal", "otel", "latest", "--endpoint", "http://127.0.0.1:9"], "otel"),
        (["journal", "lineage", "latest"], "lineage"),
    ):
        proc = cli(*args, *where, env=env)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.splitlines() == [
            f"runjournal: error: {'OpenTelemetry' if extra == 'otel' else 'OpenLineage'} "
            f"is not installed ({'opentelemetry' if extra == 'otel' else 'openlineage'}): "
            f"pip install 'runjournal[{extra}]'"
        ]
        assert proc.stdout == ""
