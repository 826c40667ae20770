"""Batch mode under `--executor processes` and `dask` (issue 30; docs/operations.md
"Batch runs", docs/internals.md "Batch runs"): the LLM step's calls run on the
coordinator's threads, which park as under `threads`, so all the step's requests go in
one batch, and the outputs are those of the online run."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.console import CLI
from support.llm_batch import BatchProject, batches, billed
from support.llm_servers import start_fake, start_fake_batch

EXECUTORS = [
    "processes",
    pytest.param("dask", marks=pytest.mark.skipif(
        not __import__("importlib").util.find_spec("distributed"), reason="no dask extra"
    )),
]  # fmt: skip


@pytest.mark.parametrize("executor", EXECUTORS)
def test_batch_mode_collects_every_request_under_another_executor(
    cli: CLI, tmp_path: Path, executor: str
) -> None:
    project = BatchProject(cli, tmp_path, docs=3, chunks=4)
    with start_fake() as online:
        proc, online_doc = project.run("online", online.url)
        assert proc.returncode == 0, proc.stderr
    with start_fake_batch() as fake:
        extra = ("--llm-mode", "batch", "--executor", executor, "--jobs", "2")
        proc, doc = project.run("batch", fake.url, *extra)
        assert proc.returncode == 0, proc.stderr
        [batch] = batches(fake)  # not one batch per call
        assert len(batch["requests"]) == project.requests
        assert set(billed(fake).values()) == {1}
    assert project.artifacts("batch") == project.artifacts("online")
    assert doc["llm"]["spent"]["cost"] == pytest.approx(online_doc["llm"]["spent"]["cost"] / 2)
