"""The worker side of `--executor processes|dask`: one `StageTask` in, one `StageReply` out.

It loads the step's module from its shipment (a path plugin from the shipped bytes),
rebuilds the stage context from plain data (consumed artifacts decoded by their
producers' codecs, as the coordinator decodes them), and runs the call through the same
boundary as a local call: whatever the module does becomes the reply's error text, never
an exception, and a module that cannot be loaded here is the typed `module_unavailable`.

A task with a `SharedCache` (the cache root is a bucket) is served from and into the
bucket itself: the checkpoints a merge or normalize reads (`PartRef`) are read there, and
the call's own checkpoint (`CheckpointTarget`) is written there by this process's own
`S3PackedStore` (its credentials from this machine's `AWS_*`, its read-through cache in
its own local directory), the reply carrying only its digests and sizes. A write that
fails falls back to the reply's bytes: the coordinator writes them as it always did
(docs/internals.md "Object-storage cache").
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import msgspec
from runjournal.adapters.module_loader import ModuleLoadError, load_shipped_module
from runjournal.adapters.module_stdout import RedactingLineWriter
from runjournal.domain.decisions import Stage
from runjournal.domain.llm import FailureCause
from runjournal.domain.modules import Module, StageContext
from runjournal.domain.pipeline import ModuleShipment
from runjournal.domain.ports import CheckpointRecord
from runjournal.domain.runner.boundary import exception_text, is_interrupt
from runjournal.domain.runner.reads import declares_reads, stage_reads
from runjournal.domain.runner.tasks import (
    CheckpointTarget,
    PartRef,
    SharedCache,
    StageReply,
    StageTask,
    StoredCheckpoint,
    encode_stage_value,
)

__all__ = ["init_process_worker", "run_stage_task"]

# What a reply carries of an error's text and traceback at most (the coordinator redacts
# and bounds the text further, as it does a local error's).
_TEXT_LIMIT = 64 * 1024

_lock = threading.Lock()
_modules: dict[tuple[str, str, str | None, bytes | None], Module] = {}
_stdout_redirected = False
# (url, endpoint, pipeline) -> this process's recorder, loader and store of that bucket
_shared: dict[tuple[str, str, str], tuple[Any, Any, Any]] = {}


# How often a pool worker checks that its coordinator is still alive.
_WATCH_S = 1.0


def init_process_worker(coordinator: int) -> None:
    """A `processes` pool worker: Ctrl-C is the coordinator's to handle (it lets calls in
    flight finish), module output never reaches the coordinator's stdout, and the worker
    exits when the coordinator is gone (killed: its forkserver's children would wait on
    the call queue for good)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _redirect_stdout()
    threading.Thread(target=_exit_with, args=(coordinator,), daemon=True).start()


def _exit_with(coordinator: int) -> None:
    while True:
        time.sleep(_WATCH_S)
        try:
            os.kill(coordinator, 0)
        except ProcessLookupError:
            os._exit(1)
        except OSError:
            continue  # exists, not ours to signal


def _redirect_stdout() -> None:
    """Module `print()` goes to stderr, redacted, as in the coordinator (once per process:
    a LocalCluster worker shares the coordinator's stdout, which carries `--json`)."""
    global _stdout_redirected
    with _lock:
        if not _stdout_redirected:
            sys.stdout = RedactingLineWriter(sys.stderr)
            _stdout_redirected = True


def _module(shipment: ModuleShipment) -> Module:
    """The shipment's module, loaded once per worker process (as the coordinator does)."""
    key = (shipment.spec, shipment.pipeline_dir, shipment.plugin_path, shipment.plugin_source)
    with _lock:
        module = _modules.get(key)
        if module is None:
            module = _modules[key] = load_shipped_module(shipment)
    return module


class _Trace:
    """`ctx.trace` on a worker: records go back with the reply, the coordinator keeps them."""

    def __init__(self) -> None:
        self.records: list[tuple[str, Any]] = []

    def record(self, name: str, data: Any) -> None:
        try:
            plain = msgspec.to_builtins(dict(data), str_keys=True, enc_hook=repr)
        except Exception as exc:
            plain = {"unrecordable": f"{type(exc).__name__}: {exc}"}
        self.records.append((str(name), plain))


def _cut(text: str) -> str:
    return text if len(text) <= _TEXT_LIMIT else text[:_TEXT_LIMIT]


def _failed(exc: BaseException, trace: _Trace | None = None, cause: Any = None) -> StageReply:
    text = exception_text(exc)
    try:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:
        tb = None
    return StageReply(
        error=_cut(text),
        cause=cause,
        traceback=tb[-_TEXT_LIMIT:] if tb else None,
        trace=trace.records if trace else [],
    )


def _unavailable(exc: ModuleLoadError) -> StageReply:
    where = f"{socket.gethostname()} (pid {os.getpid()})"
    return StageReply(
        error=_cut(f"ModuleLoadError: on worker {where}: {exc}"),
        cause=FailureCause.MODULE_UNAVAILABLE,
    )


def _local_dir(cache: SharedCache) -> str:
    """This worker's own local directory for the bucket's read-through cache: a Dask
    worker's `local_directory`, else this machine's mirror directory."""
    from runjournal.adapters.s3_store import mirror_base, mirror_dir, parse_s3_url

    base = None
    distributed = sys.modules.get("distributed")
    if distributed is not None:
        try:
            base = os.path.join(distributed.get_worker().local_directory, "runjournal")
        except (ValueError, AttributeError):
            base = None
    return mirror_dir(base or mirror_base(), parse_s3_url(cache.url), cache.endpoint)


# (url, endpoint, pipeline, local dir) -> (recorder, loader, store): the composition
# root's factory (`cli/compose.py` `open_shared_cache`), shipped with each call.
OpenCache = Callable[[str, str, str, str], tuple[Any, Any, Any]]


def _shared_io(cache: SharedCache, open_cache: OpenCache) -> tuple[Any, Any, Any]:
    """(recorder, loader, store) of the bucket, opened once per worker process."""
    key = (cache.url, cache.endpoint, cache.pipeline)
    with _lock:
        io = _shared.get(key)
        if io is None:
            local = _local_dir(cache)
            io = _shared[key] = open_cache(cache.url, cache.endpoint, cache.pipeline, local)
    return io


class CheckpointUnavailable(Exception):
    """A checkpoint the coordinator journaled is not in the bucket as it said."""


def _read(cache: SharedCache, open_cache: OpenCache, ref: PartRef) -> bytes:
    """The payload of a journaled checkpoint, from the bucket (verified by the loader:
    object against ref, envelope against its digest, payload against `ref.sha256`)."""
    _recorder, loader, _store = _shared_io(cache, open_cache)
    loaded = loader.load(ref.key, ref.codec_id)
    record = loaded.record
    if record is None or record.output_sha256 != ref.sha256:
        where = f"{ref.key.step} {ref.key.stage.value} {ref.key.chunk[:12]}".rstrip()
        raise CheckpointUnavailable(
            f"the checkpoint {where} is not in {cache.url} as journaled ({loaded.state.value})"
        )
    return bytes(record.payload)


def _write(
    cache: SharedCache, open_cache: OpenCache, target: CheckpointTarget, data: bytes, tp: Any
) -> StoredCheckpoint | None:
    """Write the call's checkpoint into the bucket; None when it cannot be (the reply then
    carries the bytes and the coordinator writes them)."""
    try:
        msgspec.json.decode(data, type=tp)  # what the coordinator's codec would refuse
        recorder, _loader, _store = _shared_io(cache, open_cache)
        output = hashlib.sha256(data).hexdigest()
        record = CheckpointRecord(
            codec_id=target.codec_id,
            lane_identity=target.lane_identity,
            digests=target.digests,
            output_sha256=output,
            payload=data,
        )
        sha, size = recorder.write(target.key, record)
    except Exception:
        return None
    return StoredCheckpoint(sha, size, output, len(data))


def run_stage_task(task: StageTask, open_cache: OpenCache | None = None) -> StageReply:
    """Run one module call; never raises but an interrupt (see the module docstring).
    Without `open_cache` a task's `SharedCache` is ignored: the worker only computes."""
    _redirect_stdout()
    context = task.context
    cache = task.cache if open_cache is not None else None
    try:
        module = _module(task.module)
        consumed = {
            producer: {
                lane: msgspec.json.decode(data, type=_module(data_of.module).artifact_type)
                for lane, data in data_of.artifacts.items()
            }
            for producer, data_of in context.consumed.items()
        }
    except ModuleLoadError as exc:
        return _unavailable(exc)
    except BaseException as exc:
        if is_interrupt(exc):
            raise
        return _failed(exc)
    trace = _Trace() if context.trace else None
    ctx = StageContext(
        step=context.step,
        lane=context.lane,
        params=dict(context.params),
        references=dict(context.references),
        consumed=consumed,
        overrides=dict(context.overrides),
        **({"trace": trace} if trace is not None else {}),
    )
    try:
        if declares_reads(module):  # the stage sees its part, cut as the coordinator cuts it
            deps = [ref for data_of in context.consumed.values() for ref in data_of.refs.values()]
            view = stage_reads(module, task.stage, ctx, deps).consumed
            ctx = msgspec.structs.replace(ctx, consumed=view)
        if task.stage is Stage.EXTRACT:
            value = module.extract(task.chunk, ctx)
        elif task.stage is Stage.MERGE:
            raw = list(task.parts)
            if task.part_refs and cache is not None and open_cache is not None:
                raw = [
                    _read(cache, open_cache, ref) if ref is not None else part
                    for part, ref in zip(task.parts, task.part_refs, strict=True)
                ]
            parts = [msgspec.json.decode(p, type=module.chunk_type) for p in raw]
            value = module.merge(parts, ctx)
        else:
            merged_bytes = task.merged
            if task.merged_ref is not None and cache is not None and open_cache is not None:
                merged_bytes = _read(cache, open_cache, task.merged_ref)
            merged = msgspec.json.decode(merged_bytes or b"null", type=module.merged_type)
            value = module.normalize(merged, ctx)
        data, warnings = encode_stage_value(task.stage, value)
    except BaseException as exc:  # whatever the module does, but an interrupt
        if is_interrupt(exc):
            raise
        return _failed(exc, trace)
    records = trace.records if trace else []
    if cache is not None and open_cache is not None and task.checkpoint is not None:
        tp = module.chunk_type if task.stage is Stage.EXTRACT else module.merged_type
        stored = _write(cache, open_cache, task.checkpoint, data, tp)
        if stored is not None:
            return StageReply(warnings=warnings, trace=records, stored=stored)
    return StageReply(data=data, warnings=warnings, trace=records)
