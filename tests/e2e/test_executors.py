"""End-to-end: `--executor processes|dask|dask://HOST:PORT` (docs/operations.md "Executors").

One project, run cold under `threads` (the baseline) and under each other executor with
its own output and cache roots: decisions, executions, artifacts, checkpoints and outputs
are byte-identical. The path plugin notes `os.getpid()` per call in a probe directory, so
where each call ran is seen, not assumed: under `processes` and Dask never in the `run`
process, under `dask://` in the workers of the LocalCluster this module starts on
loopback (its two worker processes are shared by the tests; it is closed at the end).
A worker killed by pid mid-call: the run succeeds, the call ran again in another process,
every stage is journaled once. A `--resume` under another executor reuses everything.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.cache_entries import checkpoints
from support.console import CLI, console_script

PLUGIN = '''
import os
import time

import msgspec
from runjournal.domain.modules import Module, Normalized


class Count(msgspec.Struct, frozen=True):
    words: int
    consumed: int


def _note(ctx, what):
    probe = ctx.params["probe_dir"]
    with open(os.path.join(probe, f"{os.getpid()}.log"), "a", encoding="utf-8") as fh:
        fh.write(f"{ctx.step}\\t{ctx.lane}\\t{what}\\n")


class Words(Module):
    """Counts words; notes where each call ran; sleeps `delay`; dies when asked."""

    fingerprint = "test.words/1"
    artifact_kind = "count"
    schema = "test.count/v1"
    chunk_type = dict[str, int]
    merged_type = int
    artifact_type = Count

    def extract(self, chunk, ctx):
        marker = os.path.join(ctx.params["probe_dir"], f"start-{os.getpid()}-{ctx.step}-{chunk.id}")
        open(marker, "w").close()
        print(f"extract {chunk.id} in {os.getpid()}")  # never on the run's stdout
        if ctx.params.get("die"):
            os._exit(3)
        if ctx.params.get("fail") and ctx.lane == "docs/d2.md":
            raise RuntimeError(f"refused {ctx.lane} token=" + "sk-" + "a1b2c3d4" * 5)
        time.sleep(float(ctx.params.get("delay", 0)))
        ctx.trace.record("ran", {"pid": os.getpid()})
        _note(ctx, f"extract {chunk.id}")
        return {"words": len(chunk.text.split())}

    def merge(self, parts, ctx):
        _note(ctx, "merge")
        return sum(p["words"] for p in parts)

    def normalize(self, merged, ctx):
        _note(ctx, "normalize")
        seen = sum(c.words for lanes in ctx.consumed.values() for c in lanes.values())
        return Normalized(Count(merged, seen), [f"{ctx.lane}: {merged} words"])


class Asks(Module):
    """An LLM-backed step: its calls must stay in the run's own process."""

    fingerprint = "test.asks/1"
    artifact_kind = "answer"
    schema = "test.answer/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        _note(ctx, "llm extract")
        return len(ctx.llm.complete(chunk.text))

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)
'''

STEPS = """
[[steps]]
id = "count"
module = "plugins/words.py:Words"
scope = "document"
params = {{ probe_dir = "{probe}", delay = {delay}, die = {die}, fail = {fail} }}

[[steps]]
id = "again"
module = "plugins/words.py:Words"
scope = "document"
consumes = ["count"]
params = {{ probe_dir = "{probe}" }}

[[steps]]
id = "total"
module = "plugins/words.py:Words"
scope = "corpus"
consumes = ["again"]
params = {{ probe_dir = "{probe}" }}
"""

LLM_STEP = """
[[steps]]
id = "ask"
module = "plugins/words.py:Asks"
scope = "document"
profile = "offline"
params = {{ probe_dir = "{probe}" }}
"""

OWN = {"manifest.json", "report.json", "report.html", "failure.json", "error.log"}
DOCS = 6


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    doc: dict[str, Any]
    pid: int  # the coordinator's
    calls: list[tuple[int, str, str, str]]  # (pid, step, lane, what)
    starts: list[tuple[int, str, str]]  # (pid, step, chunk id) of every extract started


class Project:
    def __init__(self, cli: CLI, root: Path) -> None:
        self.cli = cli
        self.root = root
        self.probe = root / "probe"
        self.probe.mkdir(parents=True)
        (root / "plugins").mkdir()
        (root / "plugins" / "words.py").write_text(PLUGIN)
        (root / "docs").mkdir()
        for i in range(DOCS):
            text = f"Document {i} has {'word ' * (i + 1)}here.\n\nA second paragraph {i}.\n"
            (root / "docs" / f"d{i}.md").write_text(text)
        self.pipeline("pipeline.toml")

    def pipeline(
        self,
        name: str,
        *,
        delay: float = 0.0,
        die: bool = False,
        fail: bool = False,
        llm: bool = False,
    ) -> Path:
        head = f'name = "{Path(name).stem}"\ninputs = ["docs/*.md"]\n\n[chunking]\n'
        head += 'strategy = "paragraphs"\nmax_chars = 40\n'
        steps = STEPS.format(
            probe=self.probe, delay=delay, die=str(die).lower(), fail=str(fail).lower()
        )
        if llm:
            steps += LLM_STEP.format(probe=self.probe)
        path = self.root / name
        path.write_text(head + steps)
        return path

    def start(self, tag: str, executor: str, *args: str, pipeline: str = "pipeline.toml"):
        """The run in a session of its own: a terminal's Ctrl-C (SIGINT to the process
        group) reaches the run and its workers, and nothing else."""
        for old in self.probe.iterdir():
            old.unlink()
        argv = ["run", str(self.root / pipeline), "--executor", executor, "--jobs", "2"]
        argv += ["--output-root", str(self.root / f"out-{tag}")]
        argv += ["--cache-root", str(self.root / f"cache-{tag}"), "--no-progress", "--json"]
        return subprocess.Popen(
            [*console_script(), *argv, *args],
            cwd=self.cli.cwd,
            env=self.cli.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )

    def finish(self, proc: subprocess.Popen[str], timeout: float = 180) -> Run:
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        doc = json.loads(out)  # one JSON document: module print()s went elsewhere
        calls, starts = [], []
        for path in self.probe.iterdir():
            if path.name.startswith("start-"):
                _, pid, step, chunk = path.name.split("-", 3)
                starts.append((int(pid), step, chunk))
            else:
                pid = int(path.stem)
                for line in path.read_text().splitlines():
                    step, lane, what = line.split("\t")
                    calls.append((pid, step, lane, what))
        return Run(done, doc, proc.pid, calls, starts)

    def run(self, tag: str, executor: str, *args: str, **kw: Any) -> Run:
        return self.finish(self.start(tag, executor, *args, **kw))

    def events(self, tag: str, run_id: str) -> list[dict[str, Any]]:
        proc, doc = self.cli.json(
            "journal", "show", run_id, "--output-root", str(self.root / f"out-{tag}")
        )
        assert proc.returncode == 0, proc.stderr
        return doc["events"]

    def audit(self, tag: str, run_id: str) -> None:
        proc, _ = self.cli.json(
            "journal", "audit", run_id, "--output-root", str(self.root / f"out-{tag}")
        )
        assert proc.returncode == 0, proc.stdout

    def tree(self, base: Path, skip: frozenset[str] = frozenset()) -> dict[str, str]:
        return {
            str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(base.rglob("*"))
            if p.is_file() and p.name not in skip
        }

    def checkpoints(self, tag: str) -> dict[str, str]:
        return self.tree(self.root / f"cache-{tag}" / "workspaces")


KEPT = ("LaneResolved", "StageDecided", "StageExecuted", "ArtifactGenerated", "StageFailed")


def _record(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The run's decisions, executions and artifacts in journal order, every field."""
    return [(e["type"], json.dumps(e["data"], sort_keys=True)) for e in events if e["type"] in KEPT]


def _executed_once(events: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter(
        (e["data"]["step"], e["data"]["lane"], e["data"]["stage"], e["data"]["chunk"])
        for e in events
        if e["type"] == "StageExecuted"
    )


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A LocalCluster of two worker processes on loopback, shared by this module's tests."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",  # None still binds 8787: a random port
        ) as local,
        distributed.Client(local, set_as_default=False) as client,
    ):
        yield client


def _dask_url(client: Any) -> str:
    client.wait_for_workers(2, timeout=60)  # a killed worker is restarted by its nanny
    return "dask://" + client.scheduler.address.removeprefix("tcp://")


def _worker_pids(client: Any) -> set[int]:
    return set(client.run(os.getpid).values())


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("executors")
    return Project(CLI(root / "home"), root / "project")


@pytest.fixture(scope="module")
def baseline(project: Project) -> tuple[Run, list[dict[str, Any]]]:
    """The cold `threads` run every other executor is compared with."""
    run = project.run("threads", "threads")
    assert run.proc.returncode == 0, run.proc.stderr
    assert {pid for pid, *_ in run.calls} == {run.pid}  # threads: all in the run's process
    return run, project.events("threads", run.doc["run_id"])


def _executor(name: str, cluster: Any) -> str:
    return _dask_url(cluster) if name == "dask-url" else name


@pytest.mark.parametrize("name", ["processes", "dask", "dask-url"])
def test_an_executor_is_byte_identical_to_threads_and_runs_on_workers(
    project: Project, baseline: tuple[Run, list[dict[str, Any]]], cluster: Any, name: str
) -> None:
    threads, threads_events = baseline
    run = project.run(name, _executor(name, cluster))
    assert run.proc.returncode == 0, run.proc.stderr
    events = project.events(name, run.doc["run_id"])
    assert _record(events) == _record(threads_events)
    assert run.doc["decisions"] == threads.doc["decisions"]
    assert run.doc["module_calls"] == threads.doc["module_calls"] > 3 * DOCS * 3
    assert run.doc["warnings"] == threads.doc["warnings"]
    assert project.tree(Path(run.doc["run_dir"]), frozenset(OWN)) == project.tree(
        Path(threads.doc["run_dir"]), frozenset(OWN)
    )
    assert project.checkpoints(name) == project.checkpoints("threads")
    project.audit(name, run.doc["run_id"])
    # every call ran outside the run's process: the path plugin was shipped to the workers
    pids = {pid for pid, *_ in run.calls}
    assert run.pid not in pids and pids
    assert len(run.calls) == len(threads.calls)
    if name == "dask-url":
        assert pids <= _worker_pids(cluster)
    assert "extract" in run.proc.stderr or name == "dask-url"  # print() -> stderr, not stdout


def test_a_resume_under_another_executor_reuses_everything(
    project: Project, baseline: tuple[Run, list[dict[str, Any]]], cluster: Any
) -> None:
    threads, _ = baseline
    for name in ("processes", "dask-url"):
        run = project.run("threads", _executor(name, cluster), "--resume")
        assert run.proc.returncode == 0, run.proc.stderr
        assert run.calls == [] and run.starts == []  # no module call anywhere
        decisions = run.doc["decisions"]
        assert set(decisions) == {"reused"}, decisions
        assert decisions["reused"] == sum(threads.doc["decisions"].values())
    # and back: a resume under threads of a run recorded under processes (recorded here
    # unless the byte-identity test above already did, so the test stands on its own)
    if not (project.root / "out-processes").exists():
        assert project.run("processes", "processes").proc.returncode == 0
    run = project.run("processes", "threads", "--resume")
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.calls == [] and set(run.doc["decisions"]) == {"reused"}


def _kill_one_worker_mid_call(project: Project, tag: str, executor: str) -> tuple[Run, int, str]:
    proc = project.start(tag, executor, pipeline="slow.toml")
    try:
        deadline = time.monotonic() + 120
        victim: tuple[int, str] | None = None
        while victim is None and time.monotonic() < deadline and proc.poll() is None:
            started = sorted(p.name for p in project.probe.iterdir() if p.name.startswith("st"))
            for name in started:
                _, pid, step, chunk = name.split("-", 3)
                log = project.probe / f"{pid}.log"
                lines = log.read_text().splitlines() if log.exists() else []
                ended = any(
                    ln.startswith("count\t") and ln.endswith(f"extract {chunk}") for ln in lines
                )
                if int(pid) != proc.pid and step == "count" and not ended:
                    victim = (int(pid), chunk)  # started, not finished: mid-call
                    break
            time.sleep(0.02)
        assert victim is not None, "no call started on a worker"
        os.kill(victim[0], signal.SIGKILL)  # mid-call: the extract sleeps 0.8 s
    except BaseException:
        proc.kill()
        raise
    return project.finish(proc), *victim


@pytest.mark.parametrize("name", ["processes", "dask-url"])
def test_a_worker_killed_mid_call_is_retried_elsewhere_and_recorded_once(
    project: Project, baseline: tuple[Run, list[dict[str, Any]]], cluster: Any, name: str
) -> None:
    threads, _ = baseline
    project.pipeline("slow.toml", delay=0.8)
    run, killed, chunk = _kill_one_worker_mid_call(
        project, f"kill-{name}", _executor(name, cluster)
    )
    assert run.proc.returncode == 0, run.proc.stderr
    # the killed call started again in another process, and finished there
    again = {pid for pid, step, c in run.starts if (step, c) == ("count", chunk)}
    assert killed in again and len(again) >= 2
    finished = [
        pid for pid, step, _, what in run.calls if (step, what) == ("count", f"extract {chunk}")
    ]
    assert len(finished) == 1 and finished[0] != killed
    events = project.events(f"kill-{name}", run.doc["run_id"])
    executed = _executed_once(events)
    assert set(executed.values()) == {1}
    assert len(executed) == run.doc["module_calls"] == threads.doc["module_calls"]
    assert project.tree(Path(run.doc["run_dir"]), frozenset(OWN)) == project.tree(
        Path(threads.doc["run_dir"]), frozenset(OWN)
    )
    project.audit(f"kill-{name}", run.doc["run_id"])


def test_a_module_that_kills_every_worker_fails_with_worker_lost(project: Project) -> None:
    project.pipeline("dies.toml", die=True)
    run = project.run("dies", "processes", "--jobs", "1", pipeline="dies.toml")
    assert run.proc.returncode == 1, run.proc.stderr
    error = run.doc["error"]
    assert (error["step"], error["reason_code"], error["cause"]) == (
        "count",
        "stage_failed",
        "worker_lost",
    )
    assert "WorkerLost: the worker running this call died, 3 time(s)" in error["message"]
    assert len({pid for pid, *_ in run.starts}) == 3  # three processes tried it


def test_llm_backed_steps_stay_in_the_coordinator(project: Project) -> None:
    project.pipeline("llm.toml", llm=True)
    run = project.run("llm", "processes", "--debug", "trace", pipeline="llm.toml")
    assert run.proc.returncode == 0, run.proc.stderr
    asked = {pid for pid, step, *_ in run.calls if step == "ask"}
    counted = {pid for pid, step, *_ in run.calls if step == "count"}
    assert asked == {run.pid}  # endpoint limits and budgets are the run's, in one process
    assert counted and run.pid not in counted
    # ctx.trace records made on the workers are in the run's trace, tagged by the run
    [trace] = (project.root / "out-llm" / "debug").glob("*/trace/events.jsonl")
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    ran = [r["data"] for r in records if (r["kind"], r["name"]) == ("module", "ran")]
    workers = {pid for pid, step, *_ in run.calls if step != "ask"}
    assert {d["data"]["pid"] for d in ran} == workers and run.pid not in workers
    assert {d["step"] for d in ran} == {"count", "again", "total"}


def test_a_module_missing_on_the_workers_fails_with_module_unavailable(
    project: Project, cluster: Any
) -> None:
    """Installed where the run is (its PYTHONPATH), not on the cluster's workers."""
    package = project.root / "only-here" / "helperpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "thing.py").write_text(PLUGIN)
    text = (project.root / "pipeline.toml").read_text()
    text = text.replace("plugins/words.py:Words", "helperpkg.thing:Words")
    (project.root / "installed.toml").write_text(text.replace('"pipeline"', '"installed"'))
    env_path = str(project.root / "only-here")
    for old in project.probe.iterdir():
        old.unlink()
    proc = project.cli.start(
        "run",
        str(project.root / "installed.toml"),
        "--executor",
        _dask_url(cluster),
        "--output-root",
        str(project.root / "out-missing"),
        "--cache-root",
        str(project.root / "cache-missing"),
        "--json",
        env={"PYTHONPATH": env_path},
    )
    run = project.finish(proc)
    assert run.proc.returncode == 1, run.proc.stderr
    error = run.doc["error"]
    assert (error["step"], error["cause"]) == ("count", "module_unavailable")
    assert "ModuleLoadError: on worker" in error["message"]
    assert "no module named 'helperpkg'" in error["message"]
    assert run.calls == []


def test_dask_without_the_extra_is_one_line_and_allocates_nothing(project: Project) -> None:
    shadow = project.root / "no-dask" / "distributed"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named distributed')\n")
    out = project.root / "out-no-dask"
    proc = project.cli(
        "run",
        str(project.root / "pipeline.toml"),
        "--executor",
        "dask",
        "--output-root",
        str(out),
        env={"PYTHONPATH": str(project.root / "no-dask")},
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        "runjournal: error: executor: --executor dask needs Dask's distributed scheduler, "
        "an optional extra: pip install 'runjournal[dask]'\n"
    )
    assert not out.exists()


def test_an_unreachable_scheduler_is_one_line_and_allocates_nothing(project: Project) -> None:
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = project.root / "out-unreachable"
    proc = project.cli(
        "run",
        str(project.root / "pipeline.toml"),
        "--executor",
        f"dask://127.0.0.1:{port}",
        "--output-root",
        str(out),
    )
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"runjournal: error: executor: cannot reach dask://127.0.0.1:{port}")
    assert not out.exists()


def test_a_module_error_on_a_worker_reads_as_it_does_in_threads(project: Project) -> None:
    """Same error line, failure documents and decisions; `-v` shows the worker's traceback."""
    project.pipeline("fails.toml", fail=True)
    runs = {}
    for name in ("threads", "processes"):
        run = project.run(f"fails-{name}", name, "-v", "--keep-going", pipeline="fails.toml")
        assert run.proc.returncode == 1, run.proc.stderr
        runs[name] = run
    threads, processes = runs["threads"], runs["processes"]
    assert processes.doc["error"] == threads.doc["error"]
    assert processes.doc["failures"] == threads.doc["failures"]
    assert processes.doc["decisions"] == threads.doc["decisions"]
    message = processes.doc["error"]["message"]
    assert message.startswith("RuntimeError: refused docs/d2.md token=")
    assert "a1b2c3d4" not in message  # redacted by the coordinator, as a local error is
    assert processes.doc["error"].get("cause") is None  # the module's failure, not the worker's
    tb = processes.proc.stderr
    assert "the module's traceback" in tb and "words.py" in tb and "in extract" in tb
    assert "executors/worker.py" in tb  # the traceback the worker rendered, redacted here
    assert "sk-a1b2c3d4" not in tb and "[REDACTED:openai_api_key]" in tb


@pytest.mark.parametrize("name", ["processes", "dask"])
def test_a_killed_coordinator_takes_its_workers_and_resume_keeps_what_was_checkpointed(
    project: Project, name: str
) -> None:
    psutil = pytest.importorskip("psutil")  # installed with distributed
    project.pipeline("slow.toml", delay=0.8)
    tag = f"crash-{name}"
    out, cache = project.root / f"out-{tag}", project.root / f"cache-{tag}"
    proc = project.start(tag, name, pipeline="slow.toml")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            done = [p for p in project.probe.glob("*.log") if "extract" in p.read_text()]
            stored = checkpoints(cache, "workspaces/slow/steps/count/*/extract/*.ckpt")
            if len(done) >= 2 and stored:  # both workers finished a call, one is stored
                break
            time.sleep(0.05)
        workers = {int(p.name.split("-")[1]) for p in project.probe.glob("start-*")}
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert workers and proc.pid not in workers

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(pid) for pid in workers):
        time.sleep(0.1)
    assert not [pid for pid in workers if alive(pid)]  # no orphaned worker left computing

    recovered = project.cli("recover", "--output-root", str(out))
    assert recovered.returncode == 0, recovered.stderr
    checkpointed = len(checkpoints(cache, "workspaces/slow/steps/count/*/extract/*.ckpt"))
    run = project.run(tag, "threads", "--resume", pipeline="slow.toml")
    assert run.proc.returncode == 0, run.proc.stderr
    events = project.events(tag, run.doc["run_id"])
    reused = [
        e
        for e in events
        if e["type"] == "StageDecided"
        and (e["data"]["step"], e["data"]["stage"]) == ("count", "extract")
        and e["data"]["code"] == "reused"
    ]
    assert len(reused) == checkpointed > 0  # every checkpointed result is reused


def test_the_glossary_example_under_processes_is_byte_identical_to_threads(
    example: Path, cli: CLI
) -> None:
    """Built-in modules loaded by name on the workers, a path plugin shipped, and stages
    that declare what they read (the glossary's extract reads term keys only)."""
    docs: dict[str, dict[str, Any]] = {}
    trees: dict[str, dict[str, str]] = {}
    for name in ("threads", "processes"):
        out = example.parent / f"out-{name}"
        proc, doc = cli.json(
            "run",
            str(example),
            "--executor",
            name,
            "--jobs",
            "2",
            "--output-root",
            str(out),
            "--cache-root",
            str(example.parent / f"cache-{name}"),
        )
        assert proc.returncode == 0, proc.stderr
        shown, events = cli.json("journal", "show", doc["run_id"], "--output-root", str(out))
        assert shown.returncode == 0, shown.stderr
        docs[name] = {"doc": doc, "record": _record(events["events"])}
        base = Path(doc["run_dir"])
        trees[name] = {
            str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(base.rglob("*"))
            if p.is_file() and p.name not in OWN
        }
    assert docs["processes"]["record"] == docs["threads"]["record"]
    assert docs["processes"]["doc"]["decisions"] == docs["threads"]["doc"]["decisions"]
    assert trees["processes"] == trees["threads"] and "glossary.md" in trees["threads"]


def test_an_interrupt_under_processes_lets_calls_in_flight_finish(project: Project) -> None:
    """Ctrl-C (SIGINT to the run's process group, workers included) is the coordinator's:
    workers ignore it, calls in flight finish and are checkpointed, the run ends
    interrupted (130) and `--resume` does only the rest."""
    project.pipeline("slow.toml", delay=0.8)
    tag = "sigint"
    proc = project.start(tag, "processes", pipeline="slow.toml")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(list(project.probe.glob("start-*"))) < 2:
            time.sleep(0.02)
        started = {
            p.name.split("-", 3)[3]
            for p in project.probe.glob("start-*")
            if p.name.split("-", 3)[2] == "count"
        }
        os.killpg(proc.pid, signal.SIGINT)
        run = project.finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert run.proc.returncode == 130, run.proc.stderr
    assert run.doc["status"] == "interrupted"
    finished = {
        what.split(" ", 1)[1]
        for _, step, _, what in run.calls
        if step == "count" and what.startswith("extract")
    }
    assert started <= finished  # every call that had started ran to its end
    again = project.run(tag, "processes", "--resume", pipeline="slow.toml")
    assert again.proc.returncode == 0, again.proc.stderr
    redone = {
        what.split(" ", 1)[1]
        for _, step, _, what in again.calls
        if step == "count" and what.startswith("extract")
    }
    assert not redone & finished  # what finished before the interrupt was kept
