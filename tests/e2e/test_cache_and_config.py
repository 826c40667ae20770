"""Cache modes, roots, chunk maps and `config show`, black-box on the filesystem."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.cache_entries import plans as stored_plans


def snapshot(root: Path) -> dict[str, tuple[int, int, int, bytes | None]]:
    """Mode, inode, mtime and bytes of every entry: a rewrite with equal bytes shows too."""
    if not root.exists():
        return {}
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        data = p.read_bytes() if p.is_file() else None
        out[str(p.relative_to(root))] = (st.st_mode, st.st_ino, st.st_mtime_ns, data)
    return out


def run(cli, example, tmp_path, *extra, env=None, expect=0):
    proc, doc = cli.json(
        "run",
        str(example),
        "--output-root",
        str(tmp_path / "out"),
        "--cache-root",
        str(tmp_path / "cache"),
        *extra,
        env=env,
    )
    assert proc.returncode == expect, proc.stderr
    return doc


class TestCacheModes:
    def test_use_publishes_then_reuses_plans(self, cli, example, tmp_path):
        first = run(cli, example, tmp_path)
        n = first["plans"]["computed"]
        assert first["plans"] == {"computed": n, "published": n}
        second = run(cli, example, tmp_path)
        assert second["plans"] == {"reused": n}

    def test_bypass_never_touches_chunkplans(self, cli, example, tmp_path):
        doc = run(cli, example, tmp_path, "--cache-mode", "bypass")
        n = doc["plans"]["bypassed"]
        assert doc["plans"] == {"bypassed": n, "computed": n}
        assert not (tmp_path / "cache" / "chunkplans").exists()

    def test_bypass_with_existing_store_leaves_it_untouched(self, cli, example, tmp_path):
        run(cli, example, tmp_path)
        before = snapshot(tmp_path / "cache" / "chunkplans")
        run(cli, example, tmp_path, "--cache-mode", "bypass")
        assert snapshot(tmp_path / "cache" / "chunkplans") == before

    def test_read_only_reads_and_never_writes(self, cli, example, tmp_path):
        fresh = run(cli, example, tmp_path, "--cache-mode", "read-only", "--no-checkpoints")
        assert set(fresh["plans"]) == {"computed"}
        assert not (tmp_path / "cache").exists()
        run(cli, example, tmp_path)  # populate
        before = snapshot(tmp_path / "cache")
        doc = run(cli, example, tmp_path, "--cache-mode", "read-only", "--no-checkpoints")
        assert set(doc["plans"]) == {"reused"}
        assert snapshot(tmp_path / "cache") == before

    def test_refresh_recomputes_and_republishes(self, cli, example, tmp_path):
        run(cli, example, tmp_path)
        doc = run(cli, example, tmp_path, "--cache-mode", "refresh")
        n = doc["plans"]["computed"]
        assert doc["plans"] == {"computed": n, "published": n}

    def test_corrupt_plan_is_recomputed_and_recorded(self, cli, example, tmp_path):
        run(cli, example, tmp_path)
        plans = stored_plans(tmp_path / "cache")
        data = bytearray(plans[0].read_bytes())
        data[-5] ^= 0xFF
        plans[0].write_bytes(bytes(data))
        doc = run(cli, example, tmp_path)
        assert doc["plans"]["corrupt"] == 1
        assert doc["plans"]["computed"] == 1 and doc["plans"]["published"] == 1
        _proc, events = cli.json(
            "journal", "show", doc["run_id"], "--output-root", str(tmp_path / "out")
        )
        outcomes = [
            e["data"]["outcomes"] for e in events["events"] if e["type"] == "ChunkPlanResolved"
        ]
        assert ["corrupt", "computed", "published"] in outcomes
        again = run(cli, example, tmp_path)
        assert set(again["plans"]) == {"reused"}

    def test_env_and_pipeline_choose_the_mode_below_the_flag(self, cli, example, tmp_path):
        doc = run(cli, example, tmp_path, env={"RUNJOURNAL_CACHE_MODE": "bypass"})
        assert "bypassed" in doc["plans"]
        doc = run(
            cli, example, tmp_path, "--cache-mode", "use", env={"RUNJOURNAL_CACHE_MODE": "bypass"}
        )
        assert "bypassed" not in doc["plans"]
        example.write_text(
            example.read_text().replace(
                "[chunking]", '[runjournal]\ncache_mode = "bypass"\n\n[chunking]', 1
            )
        )
        doc = run(cli, example, tmp_path)
        assert "bypassed" in doc["plans"]

    def test_concurrent_runs_publish_one_valid_plan(self, cli, example, tmp_path):
        script = Path(sys.executable).parent / "runjournal"
        procs = [
            subprocess.Popen(
                [
                    str(script),
                    "run",
                    str(example),
                    "--output-root",
                    str(tmp_path / f"out{i}"),
                    "--cache-root",
                    str(tmp_path / "cache"),
                    "--no-checkpoints",
                    "--json",
                ],
                env=cli.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cli.cwd,
            )
            for i in range(3)
        ]
        for p in procs:
            _out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        leftovers = sorted((tmp_path / "cache").rglob(".rj-tmp-*"))
        assert not leftovers and stored_plans(tmp_path / "cache")
        doc = run(cli, example, tmp_path, "--no-checkpoints")
        assert set(doc["plans"]) == {"reused"}


class TestRootsAndMaps:
    def test_roots_are_absolute_and_reported(self, cli, example, tmp_path):
        proc, doc = cli.json(
            "run",
            str(example),
            "--output-root",
            "rel-out",
            "--cache-root",
            "rel-cache",
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        assert doc["roots"]["output"] == str((tmp_path / "rel-out").resolve())
        assert doc["roots"]["cache"] == str((tmp_path / "rel-cache").resolve())
        assert doc["roots"]["debug"] == str((tmp_path / "rel-out" / "debug").resolve())
        assert Path(doc["run_dir"]).is_absolute()

    def test_nested_roots_are_refused_before_allocation(self, cli, example, tmp_path):
        out = tmp_path / "out"
        proc = cli(
            "run", str(example), "--output-root", str(out), "--cache-root", str(out / "cache")
        )
        assert proc.returncode == 2
        assert "cache_root" in proc.stderr or "output_root" in proc.stderr
        assert not out.exists()

    def test_chunk_map_only_when_asked_and_index_implies_map(self, cli, example, tmp_path):
        doc = run(cli, example, tmp_path)
        names = {o["name"] for o in doc["outputs"]}
        assert "chunk-map.json" not in names
        doc = run(cli, example, tmp_path, "--chunk-map-index")
        by_name = {o["name"]: o for o in doc["outputs"]}
        assert {"chunk-map.json", "chunk-map.index.json"} <= set(by_name)
        map_bytes = Path(by_name["chunk-map.json"]["path"]).read_bytes()
        index = json.loads(Path(by_name["chunk-map.index.json"]["path"]).read_bytes())
        assert index["sha256"] == hashlib.sha256(map_bytes).hexdigest()
        assert index["size"] == len(map_bytes)
        chunks = json.loads(map_bytes)["chunks"]
        assert chunks and all(
            {"source", "start", "end", "sha256"} <= set(v) for v in chunks.values()
        )
        manifest = Path(doc["manifest"]).read_text()
        assert "chunks" not in json.loads(manifest)
        for chunk_id in list(chunks)[:3]:
            assert chunk_id not in manifest


class TestConfigShow:
    def test_text_and_json_with_origins(self, cli, example, tmp_path):
        proc, doc = cli.json(
            "config",
            "show",
            str(example),
            "--jobs",
            "3",
            env={"RUNJOURNAL_CACHE_MODE": "read-only"},
        )
        assert proc.returncode == 0, proc.stderr
        rows = {r["name"]: r for r in doc["settings"]}
        assert rows["jobs"]["value"] == 3 and rows["jobs"]["origin"] == "flag"
        assert rows["cache_mode"]["value"] == "read-only" and rows["cache_mode"]["origin"] == "env"
        assert rows["output_root"]["origin"] == "default"
        text = cli("config", "show", str(example))
        assert text.returncode == 0 and "ORIGIN" in text.stdout

    @pytest.mark.parametrize(
        ("args", "env", "needle"),
        [
            (["--cache-mode", "fast"], {}, "cache_mode"),
            (["--jobs", "many"], {}, "jobs"),
            ([], {"RUNJOURNAL_JOBS": "0"}, "RUNJOURNAL_JOBS"),
        ],
    )
    def test_invalid_values_exit_2_naming_setting_and_origin(
        self, cli, example, tmp_path, args, env, needle
    ):
        proc = cli("run", str(example), "--output-root", str(tmp_path / "o"), *args, env=env)
        assert proc.returncode == 2
        assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "o").exists()

    def test_user_config_file_is_an_origin(self, cli, example, tmp_path):
        config_dir = cli.home / ".config" / "runjournal"
        config_dir.mkdir(parents=True)
        (config_dir / "config.toml").write_text("jobs = 2\n")
        proc, doc = cli.json("config", "show", str(example))
        assert proc.returncode == 0, proc.stderr
        rows = {r["name"]: r for r in doc["settings"]}
        assert rows["jobs"]["value"] == 2 and rows["jobs"]["origin"] == "user-config"
        (config_dir / "config.toml").write_text("jobs = [\n")
        proc = cli("run", str(example), "--output-root", str(tmp_path / "o"))
        assert proc.returncode == 2 and "config" in proc.stderr
        assert not (tmp_path / "o").exists()


def test_an_unusable_cache_root_is_exit_2_and_allocates_nothing(cli, example, tmp_path):
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "out"
    proc = cli(
        "run",
        str(example),
        "--output-root",
        str(out),
        "--cache-root",
        str(tmp_path / "afile" / "sub"),
    )
    assert proc.returncode == 2 and "cache_root" in proc.stderr
    assert not out.exists()


def test_jobs_is_bounded_in_p1(cli, example, tmp_path):
    out = tmp_path / "out"
    proc = cli("run", str(example), "--output-root", str(out), "--jobs", "9" * 25)
    assert proc.returncode == 2 and "jobs" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
