"""Batch mode against the fake OpenAI Files + Batches server (docs/operations.md "Batch runs").

- A batch run's artifacts are byte for byte those of the online run of the same
  pipeline, at half the cost, in one batch.
- SIGKILL after the upload, after the batch was created (its answer lost), while polling
  and while collecting; then `recover` and `--resume`: exactly one batch per request set,
  no request completed (paid) twice, the replies collected before the kill reused.
- Injected errors and expiry: only those requests are resubmitted, in one follow-up
  batch, and the run succeeds.
- `--no-wait` submits and stops; `--resume` collects the same batch.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.console import CLI
from support.llm_batch import BatchProject, batches, billed, per_set
from support.llm_servers import ServerProcess, start_fake, start_fake_batch


@pytest.fixture
def online_plain() -> Iterator[ServerProcess]:
    with start_fake() as server:  # the chat endpoint alone: the reference run
        yield server


def test_a_batch_run_is_byte_identical_to_online_at_half_the_cost(
    cli: CLI, tmp_path: Path, online_plain: ServerProcess
) -> None:
    project = BatchProject(cli, tmp_path, docs=5, chunks=8)
    proc, online_doc = project.run("online", online_plain.url)
    assert proc.returncode == 0, proc.stderr
    with start_fake_batch() as fake:
        proc, doc = project.run("batch", fake.url, "--llm-mode", "batch", "--jobs", "2")
        assert proc.returncode == 0, proc.stderr
        [batch] = batches(fake)
        assert batch["status"] == "completed" and len(batch["requests"]) == project.requests
        assert set(billed(fake).values()) == {1}
    assert project.artifacts("batch") == project.artifacts("online")
    spent, online_spent = doc["llm"]["spent"], online_doc["llm"]["spent"]
    assert spent["attempts"] == online_spent["attempts"] == project.requests
    assert spent["prompt_tokens"] == online_spent["prompt_tokens"]
    assert spent["cost"] == pytest.approx(online_spent["cost"] / 2)
    # the journal says which stages came from which batch
    proc, shown = cli.json(
        "journal", "show", doc["run_id"], "--output-root", str(tmp_path / "batch" / "out")
    )
    types = [e["type"] for e in shown["events"]]
    assert types.count("LLMBatchSubmitted") == types.count("LLMBatchCompleted") == 1
    [submitted] = [e["data"] for e in shown["events"] if e["type"] == "LLMBatchSubmitted"]
    assert submitted["batch_id"] == batch["id"] and submitted["requests"] == project.requests
    assert len(submitted["stages"]) == project.requests
    assert "LLMBatchPolled" in types


def test_a_profile_in_batch_mode_batches_without_the_flag(cli: CLI, tmp_path: Path) -> None:
    project = BatchProject(cli, tmp_path, docs=2, chunks=3)
    with start_fake_batch() as fake:
        args = project.run_args("batch", fake.url)
        profiles = tmp_path / "batch.toml"
        profiles.write_text(profiles.read_text() + 'mode = "batch"\n')
        proc, _ = cli.json(*args, env=project.env)
        assert proc.returncode == 0, proc.stderr
        assert len(batches(fake)) == 1
        # --llm-mode online wins over the profile: the same requests sent one by one
        proc, _ = cli.json(
            *project.run_args("again", fake.url, "--llm-mode", "online"), env=project.env
        )
        assert proc.returncode == 0, proc.stderr
        assert len(batches(fake)) == 1


def test_a_steps_mode_batches_its_requests(cli: CLI, tmp_path: Path) -> None:
    project = BatchProject(cli, tmp_path, docs=2, chunks=3)
    pipeline = tmp_path / "pipeline.toml"
    text = pipeline.read_text().replace(
        'module = "llm.json"', 'module = "llm.json"\nmode = "batch"'
    )
    pipeline.write_text(text)
    with start_fake_batch() as fake:
        proc, _ = project.run("batch", fake.url)
        assert proc.returncode == 0, proc.stderr
        [batch] = batches(fake)
        assert len(batch["requests"]) == project.requests


@pytest.mark.parametrize(
    ("what", "after"),
    [
        ("upload", 0),  # the input file is stored; the run never learned its id
        ("create", 0),  # the batch is created; the run never learned its id
        ("retrieve", 2),  # while polling
        ("content", 1),  # the output file was read and stored; the error file hangs
    ],
)
def test_sigkill_at_each_remote_step_then_resume_submits_nothing_twice(
    cli: CLI, tmp_path: Path, online_plain: ServerProcess, what: str, after: int
) -> None:
    project = BatchProject(cli, tmp_path, docs=3, chunks=4, faulty=(1,))
    proc, _ = project.run("online", online_plain.url)
    assert proc.returncode == 0, proc.stderr
    with start_fake_batch(progress=6 * 3600) as fake:  # several polls in progress
        code = project.killed_at(fake, what, after, "batch", "--jobs", "2")
        assert code == -signal.SIGKILL
        project.recover("batch")
        proc, doc = project.run("batch", fake.url, "--llm-mode", "batch", "--resume")
        assert proc.returncode == 0, proc.stderr
        # one batch per request set: the first round's, and one follow-up of the errored
        # request (faults hit a request's first batch only)
        assert sorted(per_set(fake).values()) == [1, 1]
        rounds = sorted(len(b["requests"]) for b in batches(fake))
        assert rounds == [1, project.requests]
        # no request completed twice, none missing
        assert set(billed(fake).values()) == {1}
        assert len(billed(fake)) == project.requests
        if what == "content":  # what was collected before the kill is reused
            assert doc["llm"]["saved"]["attempts"] == project.requests - 1
    assert project.artifacts("batch") == project.artifacts("online")


def test_sigint_while_polling_then_resume_follows_the_same_batch(
    cli: CLI, tmp_path: Path, online_plain: ServerProcess
) -> None:
    project = BatchProject(cli, tmp_path, docs=2, chunks=3)
    proc, _ = project.run("online", online_plain.url)
    assert proc.returncode == 0, proc.stderr
    with start_fake_batch(tick=1, progress=20 * 3600) as fake:  # in progress for a while
        assert project.interrupted_polling(fake, "batch", polls=3) == 130
        [batch] = batches(fake)
        assert batch["status"] in ("validating", "in_progress")  # not done: still polled
        fake.control("/_control/clock", {"advance": 21 * 3600})  # now it can finish
        proc, _ = project.run("batch", fake.url, "--llm-mode", "batch", "--resume")
        assert proc.returncode == 0, proc.stderr
        assert len(batches(fake)) == 1 and set(billed(fake).values()) == {1}
    assert project.artifacts("batch") == project.artifacts("online")


def test_errored_and_expired_requests_alone_go_into_one_follow_up_batch(
    cli: CLI, tmp_path: Path, online_plain: ServerProcess
) -> None:
    project = BatchProject(cli, tmp_path, docs=20, chunks=10)
    proc, _ = project.run("online", online_plain.url)
    assert proc.returncode == 0, proc.stderr
    with start_fake_batch(error_rate=0.03, expire_rate=0.02) as fake:
        proc, doc = project.run("batch", fake.url, "--llm-mode", "batch", "--jobs", "4")
        assert proc.returncode == 0, proc.stderr
        first, follow = batches(fake)
        assert first["status"] == "expired" and follow["status"] == "completed"
        failed = {r["custom_id"] for r in first["requests"] if r["outcome"] != "completed"}
        outcomes = {r["outcome"] for r in first["requests"]} - {"completed"}
        assert outcomes == {"errored", "expired"}
        assert {r["custom_id"] for r in follow["requests"]} == failed
        assert 0 < len(failed) < project.requests // 5
        assert set(billed(fake).values()) == {1}
        assert doc["llm"]["spent"]["attempts"] == project.requests
    assert project.artifacts("batch") == project.artifacts("online")


def test_no_wait_submits_and_stops_then_resume_collects_the_same_batch(
    cli: CLI, tmp_path: Path, online_plain: ServerProcess
) -> None:
    project = BatchProject(cli, tmp_path, docs=2, chunks=4)
    proc, _ = project.run("online", online_plain.url)
    assert proc.returncode == 0, proc.stderr
    with start_fake_batch() as fake:
        proc, doc = project.run("batch", fake.url, "--llm-mode", "batch", "--no-wait")
        assert proc.returncode == 130, proc.stderr
        assert doc["status"] == "interrupted"
        [batch] = batches(fake)
        assert batch["status"] == "validating"  # submitted, never polled
        proc, doc = project.run("batch", fake.url, "--llm-mode", "batch", "--resume")
        assert proc.returncode == 0, proc.stderr
        assert len(batches(fake)) == 1
        assert set(billed(fake).values()) == {1}
    assert project.artifacts("batch") == project.artifacts("online")


def test_a_bad_llm_mode_is_one_line_and_exit_2(cli: CLI, tmp_path: Path) -> None:
    project = BatchProject(cli, tmp_path, docs=1, chunks=1)
    proc = cli(*project.run_args("x", "http://127.0.0.1:9/v1", "--llm-mode", "later"))
    assert proc.returncode == 2
    assert "invalid llm_mode 'later'" in proc.stderr and "Traceback" not in proc.stderr


def test_the_llm_extract_example_in_batch_mode_is_byte_identical_to_online(
    cli: CLI, tmp_path: Path, online_plain: ServerProcess
) -> None:
    """The example's stages ask one question per action item, one after the other: each
    round of questions is one batch (three here), and the outputs are those of online."""
    import shutil

    from support.llm_batch import PROFILE
    from support.llm_servers import FAKE_KEY_ENV, fake_key_env
    from support.paths import REPO

    example = tmp_path / "ex"
    shutil.copytree(REPO / "examples" / "llm-extract", example)
    env = {**cli.env, **fake_key_env()}
    params = "params = { temperature = 0, seed = 1, cache_prompt = false }"

    def run(name: str, url: str, *extra: str):
        profiles = tmp_path / f"{name}.toml"
        profiles.write_text(PROFILE.format(url=url, key_env=FAKE_KEY_ENV) + params + "\n")
        return cli.json(
            "run", str(example / "pipeline.toml"), "--profiles-file", str(profiles),
            "--profile", "fake", "--output-root", str(tmp_path / name / "out"),
            "--cache-root", str(tmp_path / name / "cache"), "--no-progress", *extra, env=env,
        )  # fmt: skip

    def outputs(name: str) -> dict[str, bytes]:
        base = tmp_path / name / "out" / "latest-ok"
        skip = ("manifest.json", "report.json")
        return {
            str(p.relative_to(base)): p.read_bytes()
            for p in sorted(base.rglob("*"))
            if p.is_file() and p.name not in skip
        }

    proc, online_doc = run("online", online_plain.url)
    assert proc.returncode == 0, proc.stderr
    with start_fake_batch() as fake:
        proc, doc = run("batch", fake.url, "--llm-mode", "batch")
        assert proc.returncode == 0, proc.stderr
        assert len(batches(fake)) >= 2 and set(billed(fake).values()) == {1}
    assert "action-items.md" in outputs("batch")
    assert outputs("batch") == outputs("online")
    assert doc["llm"]["spent"]["cost"] == pytest.approx(online_doc["llm"]["spent"]["cost"] / 2)


def test_two_thousand_chunks_go_in_one_batch_byte_identical_to_online(
    cli: CLI, tmp_path: Path, online_plain: ServerProcess
) -> None:
    project = BatchProject(cli, tmp_path, docs=100, chunks=20)
    proc, online_doc = project.run("online", online_plain.url, "--jobs", "4")
    assert proc.returncode == 0, proc.stderr
    with start_fake_batch() as fake:
        proc, doc = project.run("batch", fake.url, "--llm-mode", "batch", "--jobs", "4")
        assert proc.returncode == 0, proc.stderr
        [batch] = batches(fake)
        assert len(batch["requests"]) == project.requests == 2000
    assert project.artifacts("batch") == project.artifacts("online")
    assert doc["llm"]["spent"]["cost"] == pytest.approx(online_doc["llm"]["spent"]["cost"] / 2)


def test_plan_forecasts_a_batch_run_at_the_batch_price(cli: CLI, tmp_path: Path) -> None:
    """`plan --llm-mode batch` (or a batch-mode profile or step) prices the requests it
    forecasts at `batch_discount` times the list price, as the batch run will pay."""
    project = BatchProject(cli, tmp_path, docs=2, chunks=3)
    args = project.run_args("p", "http://127.0.0.1:9/v1")
    plan_args = ["plan", *[a for a in args[1:] if a != "--no-progress"]]
    proc, online = cli.json(*plan_args, env=project.env)
    assert proc.returncode == 0, proc.stderr
    proc, batch = cli.json(*plan_args, "--llm-mode", "batch", env=project.env)
    assert proc.returncode == 0, proc.stderr
    cost = online["estimate"]["llm"]["executed"]["cost"]
    assert cost > 0
    assert batch["estimate"]["llm"]["executed"]["cost"] == pytest.approx(cost / 2)


def test_a_batch_the_provider_does_not_know_is_submitted_anew(
    cli: CLI, tmp_path: Path, online_plain: ServerProcess
) -> None:
    """A key switch (or a deleted batch): the record names a batch the provider answers
    404 for; `--resume` submits those requests again, once, and the run succeeds."""
    project = BatchProject(cli, tmp_path, docs=2, chunks=3)
    proc, _ = project.run("online", online_plain.url)
    assert proc.returncode == 0, proc.stderr
    with start_fake_batch() as fake:
        proc, _ = project.run("batch", fake.url, "--llm-mode", "batch", "--no-wait")
        assert proc.returncode == 130, proc.stderr
        fake.control("/_control/forget", {})
        proc, _ = project.run("batch", fake.url, "--llm-mode", "batch", "--resume")
        assert proc.returncode == 0, proc.stderr
        [batch] = batches(fake)  # the one the provider knows now
        assert batch["status"] == "completed" and len(batch["requests"]) == project.requests
    assert project.artifacts("batch") == project.artifacts("online")
