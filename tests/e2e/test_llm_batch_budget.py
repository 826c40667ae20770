"""`--max-cost` counts what a batch can spend before it is submitted (issue 30; docs/
operations.md "Batch runs", "Budgets"): each waiting request holds its upper bound at
the batch price; one that does not fit fails with `budget_exhausted` and never goes into
a batch, so what was submitted can never cost more than the limit. `--resume` without
the limit submits only the rest."""

from __future__ import annotations

from pathlib import Path

from support.console import CLI
from support.llm_batch import BatchProject, batches, billed
from support.llm_servers import start_fake_batch


def test_max_cost_holds_each_request_before_its_batch_is_submitted(
    cli: CLI, tmp_path: Path
) -> None:
    project = BatchProject(cli, tmp_path, docs=2, chunks=3)
    # one request's bound: ~18 prompt tokens (estimated) + max_tokens 40, at the batch
    # price (1.0 and 2.0 a million, halved): about 0.000049; three fit, six do not
    limit = "0.00016"
    with start_fake_batch() as fake:
        proc, doc = project.run("b", fake.url, "--llm-mode", "batch", "--max-cost", limit)
        assert proc.returncode == 1, proc.stderr
        assert "budget_exhausted" in proc.stderr
        submitted = [r for b in batches(fake) for r in b["requests"]]
        assert 0 < len(submitted) < project.requests
        # what was submitted, at its upper bound, fits the limit; what it spent too
        assert doc["llm"]["spent"]["cost"] <= float(limit)
        assert doc["llm"]["spent"]["attempts"] == len(submitted)
        proc, resumed = project.run("b", fake.url, "--llm-mode", "batch", "--resume")
        assert proc.returncode == 0, proc.stderr
        # only the requests that did not fit went into the second batch
        sizes = [len(b["requests"]) for b in batches(fake)]
        assert sizes == [len(submitted), project.requests - len(submitted)]
        assert set(billed(fake).values()) == {1}
    assert resumed["llm"]["saved"]["calls"] == len(submitted)
