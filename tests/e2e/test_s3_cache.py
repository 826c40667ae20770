"""`cache_root = "s3://bucket/prefix"` against a real S3 server (SeaweedFS on loopback),
end to end (docs/operations.md "Object-storage cache").

Each "machine" is a `CLI` with its own HOME (so its own user cache directory and local
mirror) and the same bucket: what one writes, the other reuses. Outputs are compared
byte for byte with the same run on a local cache root.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.console import CLI
from support.llm_servers import REPO, ServerProcess, start_fake
from support.paths import EXAMPLE

pytest.importorskip("obstore")
pytest.importorskip("boto3")  # the fixture inspects the bucket through it


class Bucket:
    """One test's bucket on the session's server, with a boto3 client for inspection."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.env = server.env()
        self.name = server.bucket()
        self.url = f"s3://{self.name}/team"
        self.client = server.client()

    def listing(self, prefix: str = "team/") -> list[str]:
        return self.server.keys(self.name, prefix)

    def read(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()

    def write(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.name, Key=key, Body=data)

    def entries(self) -> dict[str, str]:
        """Entry name -> "ref" or the key of the pack that holds its newest record."""
        return self.server.entries(self.name, "team/")

    def record(self, name: str) -> tuple[str, int, int]:
        """(pack key, offset, size) of `name`'s newest pack record."""
        from runjournal.adapters.s3_packs import decode_index

        key = self.entries()[name]
        found = [r for r in decode_index(self.read(key)).records if r.name == name]
        return key, found[-1].offset, found[-1].size

    def object_of(self, ref_key: str) -> str:
        """The object key a ref names."""
        digest = self.read(ref_key).split(b"\n")[1].decode()
        return f"team/objects/{digest[:2]}/{digest}"


@pytest.fixture
def bucket(seaweedfs: Any) -> Bucket:
    return Bucket(seaweedfs)


def machine(tmp_path: Path, name: str) -> CLI:
    return CLI(tmp_path / "homes" / name)


def project(tmp_path: Path, source: Path = EXAMPLE, name: str = "project") -> Path:
    dest = tmp_path / "projects" / name
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    return dest / "pipeline.toml"


def run(
    cli: CLI, pipeline: Path, cache: str, *extra: str, env: dict[str, str] | None = None
) -> tuple[int, dict[str, Any], str]:
    out = pipeline.parent / "runs"
    proc = cli(
        "run",
        str(pipeline),
        "--output-root",
        str(out),
        "--cache-root",
        cache,
        "--json",
        *extra,
        env=env,
        timeout=600,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, doc, proc.stderr


def outputs(doc: dict[str, Any]) -> dict[str, str]:
    return {
        o["name"]: hashlib.sha256(Path(o["path"]).read_bytes()).hexdigest() for o in doc["outputs"]
    }


def test_glossary_on_s3_matches_a_local_cache_and_a_second_machine_reuses_it(
    tmp_path: Path, bucket: Bucket
) -> None:
    local = machine(tmp_path, "local")
    code, base, err = run(local, project(tmp_path, name="local"), str(tmp_path / "cache"))
    assert code == 0, err

    first = machine(tmp_path, "first")
    pipeline = project(tmp_path, name="first")
    code, doc, err = run(first, pipeline, bucket.url, env=bucket.env)
    assert code == 0, err
    assert outputs(doc) == outputs(base)
    assert doc["decisions"] == base["decisions"]
    assert doc["roots"]["cache"] == bucket.url  # the bucket is the cache (journaled)
    entries = bucket.entries()
    ckpts = [n for n in entries if n.startswith("workspaces/") and n.endswith(".ckpt")]
    assert ckpts and all(entries[n].startswith("team/packs/") for n in ckpts)
    assert entries["workspaces/glossary/workspace.json"] == "ref"  # rewritten: a ref
    assert any(n.startswith("chunkplans/") and entries[n] != "ref" for n in entries)
    # small entries are group-committed: far fewer objects than entries
    assert len(bucket.listing("team/packs/")) * 4 < len(ckpts)
    # nothing of the checkpoint store is a local file: only the mirror's own state
    mirror = next((first.home / ".cache" / "runjournal" / "s3").iterdir())
    assert not (mirror / "workspaces").exists() and not (mirror / "pack").exists()
    assert json.loads((mirror / "remote.json").read_text())["url"] == bucket.url

    planner = machine(tmp_path, "planner")  # `plan` on another machine reads the bucket
    proc = planner(
        "plan", str(pipeline), "--cache-root", bucket.url, "--resume", "--json", env=bucket.env
    )
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)["decisions"]) == {"reused"}

    second = machine(tmp_path, "second")  # fresh HOME, fresh local cache, same bucket
    code, again, err = run(
        second, project(tmp_path, name="second"), bucket.url, "--resume", env=bucket.env
    )
    assert code == 0, err
    assert set(again["decisions"]) == {"reused"}, again["decisions"]
    assert sum(again["decisions"].values()) == sum(base["decisions"].values())
    assert outputs(again) == outputs(base)
    # no credential reaches the journal, the manifest or the report
    secret = bucket.env["AWS_SECRET_ACCESS_KEY"].encode()
    for path in (pipeline.parent / "runs").rglob("*"):
        if path.is_file():
            assert secret not in path.read_bytes(), path


def test_a_corrupted_object_is_detected_and_recomputed(tmp_path: Path, bucket: Bucket) -> None:
    first = machine(tmp_path, "first")
    code, base, err = run(first, project(tmp_path, name="first"), bucket.url, env=bucket.env)
    assert code == 0, err
    name = next(n for n in bucket.entries() if n.endswith(".ckpt"))
    pack, offset, size = bucket.record(name)
    good = bucket.read(pack)
    bucket.write(pack, good[: offset + size - 7] + b"garbage" + good[offset + size :])

    second = machine(tmp_path, "second")
    pipeline = project(tmp_path, name="second")
    code, doc, err = run(second, pipeline, bucket.url, "--resume", env=bucket.env)
    assert code == 0, err
    assert doc["decisions"].get("checkpoint_corrupt", 0) >= 1, doc["decisions"]
    assert outputs(doc) == outputs(base)
    assert bucket.record(name)[0] != pack  # the recompute wrote it again, in a newer pack

    third = machine(tmp_path, "third")
    code, doc, err = run(third, pipeline, bucket.url, "--resume", env=bucket.env)
    assert code == 0, err
    assert set(doc["decisions"]) == {"reused"}, doc["decisions"]


def test_gc_cache_deletes_unreferenced_entries_by_prefix(tmp_path: Path, bucket: Bucket) -> None:
    cli = machine(tmp_path, "first")
    pipeline = project(tmp_path, name="first")
    code, _doc, err = run(cli, pipeline, bucket.url, env=bucket.env)
    assert code == 0, err
    doc_file = next((pipeline.parent / "docs").glob("*.md"))
    doc_file.write_text(doc_file.read_text() + "\n\nA **ledger** is kept.\n")
    code, latest, err = run(cli, pipeline, bucket.url, "--resume", env=bucket.env)
    assert code == 0, err
    before = set(bucket.entries())
    out = str(pipeline.parent / "runs")
    proc = cli(
        "gc",
        "--keep",
        "1",
        "--cache",
        "--output-root",
        out,
        "--cache-root",
        bucket.url,
        "--json",
        env=bucket.env,
        cwd=pipeline.parent,
    )
    assert proc.returncode == 0, proc.stderr
    cache = json.loads(proc.stdout)["cache"]
    assert cache["root"] == bucket.url
    assert cache["removed"], cache
    after = set(bucket.entries())
    removed = {r["name"] for r in cache["removed"]}
    assert removed <= before and not removed & after
    # what the kept run uses stays: a resume elsewhere reuses every stage
    other = machine(tmp_path, "other")
    code, doc, err = run(other, pipeline, bucket.url, "--resume", env=bucket.env)
    assert code == 0, err
    assert set(doc["decisions"]) == {"reused"}, doc["decisions"]
    assert outputs(doc) == outputs(latest)


def test_a_dask_cluster_with_the_s3_cache_gives_the_same_results(
    tmp_path: Path, bucket: Bucket
) -> None:
    pytest.importorskip("distributed")
    local = machine(tmp_path, "local")
    code, base, err = run(local, project(tmp_path, name="local"), str(tmp_path / "cache"))
    assert code == 0, err
    cli = machine(tmp_path, "dask")
    pipeline = project(tmp_path, name="dask")
    code, doc, err = run(
        cli, pipeline, bucket.url, "--executor", "dask", "--jobs", "2", env=bucket.env
    )
    assert code == 0, err
    assert outputs(doc) == outputs(base)
    assert doc["decisions"] == base["decisions"]
    code, again, err = run(
        machine(tmp_path, "dask2"),
        pipeline,
        bucket.url,
        "--executor",
        "dask",
        "--jobs",
        "2",
        "--resume",
        env=bucket.env,
    )
    assert code == 0, err
    assert set(again["decisions"]) == {"reused"}, again["decisions"]


LLM_PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
api_key_env = "RJ_FAKE_KEY"
max_retries = 1
"""


@pytest.fixture(scope="module")
def fake() -> Any:
    with start_fake() as server:
        yield server


def test_the_llm_example_on_s3_matches_a_local_cache(
    tmp_path: Path, bucket: Bucket, fake: ServerProcess
) -> None:
    env = {"RJ_FAKE_KEY": "sk-" + "local-" + "y" * 24}

    def llm_project(name: str) -> Path:
        pipeline = project(tmp_path, REPO / "examples" / "llm-extract", name)
        with open(pipeline.parent / "profiles.toml", "a") as profiles:
            profiles.write(LLM_PROFILE.format(url=fake.url))
        return pipeline

    local = machine(tmp_path, "local")
    code, base, err = run(
        local, llm_project("local"), str(tmp_path / "cache"), "--profile", "fake", env=env
    )
    assert code == 0, err
    first = machine(tmp_path, "first")
    code, doc, err = run(
        first, llm_project("first"), bucket.url, "--profile", "fake", env={**env, **bucket.env}
    )
    assert code == 0, err
    assert outputs(doc) == outputs(base)
    assert any(n.startswith("llm/replies/") for n in bucket.entries())
    asked = len(fake.requests())
    second = machine(tmp_path, "second")
    code, again, err = run(
        second,
        llm_project("second"),
        bucket.url,
        "--profile",
        "fake",
        "--resume",
        env={**env, **bucket.env},
    )
    assert code == 0, err
    assert set(again["decisions"]) == {"reused"}, again["decisions"]
    assert outputs(again) == outputs(base)
    assert len(fake.requests()) == asked  # nothing asked again on the second machine
    assert env["RJ_FAKE_KEY"].encode() not in b"".join(
        bucket.read(k) for k in bucket.listing() if "/refs/" in k or "/packs/" in k
    )


def test_the_server_killed_mid_run_fails_the_run_and_resume_loses_nothing(
    tmp_path: Path, seaweedfs: Any
) -> None:
    from support import seaweedfs as weed
    from support.sleepy_project import write_sleepy_project

    server = weed.start(tmp_path / "own-server")  # its own server: this test kills it
    try:
        own = Bucket(server)
        work = tmp_path / "projects" / "s3"
        probe = write_sleepy_project(work, name="sleepy", docs=10, delay=0.4)
        cli = machine(tmp_path, "first")
        out = str(work / "runs")
        proc = cli.start(
            "run",
            str(work / "pipeline.toml"),
            "--output-root",
            out,
            "--cache-root",
            own.url,
            env={**own.env, **probe},
        )
        log = work / "calls.log"
        while proc.poll() is None and (not log.exists() or len(log.read_text().splitlines()) < 6):
            time.sleep(0.05)
        server.kill()
        _stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 1, stderr
        assert "Traceback" not in stderr
        errors = [line for line in stderr.splitlines() if line.startswith("runjournal: error")]
        assert len(errors) <= 1, stderr
        assert "object store" in stderr, stderr

        server.start()  # same ports, same data
        env = {**own.env, **probe}
        started = len(log.read_text().splitlines())
        code, doc, err = run(cli, work / "pipeline.toml", own.url, "--resume", env=env)
        assert code == 0, err
        # what was written before the kill is reused: only the rest is computed
        assert doc["decisions"].get("reused", 0) >= 1, doc["decisions"]
        assert len(log.read_text().splitlines()) - started < 20  # 10 documents, 2 chunks each
        code, doc, err = run(
            machine(tmp_path, "second"), work / "pipeline.toml", own.url, "--resume", env=env
        )
        assert code == 0, err
        assert set(doc["decisions"]) == {"reused"}, doc["decisions"]
    finally:
        server.stop()


def test_an_s3_cache_root_that_is_not_a_url_is_one_line_exit_2(tmp_path: Path) -> None:
    cli = machine(tmp_path, "first")
    pipeline = project(tmp_path, name="first")
    proc = cli("run", str(pipeline), "--cache-root", "s3://ab/..", env={})
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "cache_root" in proc.stderr and "Traceback" not in proc.stderr


DIES = '''
import os

from runjournal.domain.modules import Module, Normalized


class Dies(Module):
    """Kills its Dask worker the first time each chunk is extracted."""

    fingerprint = "test.dies-s3/1"
    artifact_kind = "count"
    schema = "test.count/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        marker = os.path.join(ctx.params["probe_dir"], f"died-{chunk.id}")
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(3)
        return len(chunk.text.split())

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)
'''


def test_a_dask_worker_killed_mid_call_with_the_s3_cache_writes_each_checkpoint_once(
    tmp_path: Path, bucket: Bucket
) -> None:
    pytest.importorskip("distributed")
    root = tmp_path / "projects" / "dies"
    (root / "plugins").mkdir(parents=True)
    (root / "plugins" / "dies.py").write_text(DIES)
    (root / "docs").mkdir()
    for i in range(4):
        (root / "docs" / f"d{i}.md").write_text(f"Document {i} has {'word ' * (i + 1)}here.\n")
    (root / "probe").mkdir()
    pipeline = root / "pipeline.toml"
    pipeline.write_text(
        'name = "dies"\ninputs = ["docs/*.md"]\n[[steps]]\nid = "count"\n'
        f'module = "plugins/dies.py:Dies"\nscope = "document"\n'
        f'params = {{ probe_dir = "{root / "probe"}" }}\n'
    )
    cli = machine(tmp_path, "dask")
    code, doc, err = run(
        cli, pipeline, bucket.url, "--executor", "dask", "--jobs", "2", env=bucket.env
    )
    assert code == 0 and doc["status"] == "succeeded", err
    assert len(list((root / "probe").glob("died-*"))) == 4  # every call killed a worker
    shown = cli("journal", "show", doc["run_id"], "--output-root", str(root / "runs"), "--json")
    events = json.loads(shown.stdout)["events"]
    written = Counter(
        (e["data"]["lane"], e["data"]["stage"], e["data"].get("chunk"))
        for e in events
        if e["type"] == "CheckpointWritten"
    )
    assert written and set(written.values()) == {1}  # each checkpoint written once
    stored = [
        n for n in bucket.entries() if n.startswith("workspaces/dies/") and n.endswith(".ckpt")
    ]
    assert len(stored) == len(written)
