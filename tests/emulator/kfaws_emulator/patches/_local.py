"""What the local runners share: the work directory, child processes, and moto access from threads.

Work directory
    ``KFAWS_EMULATOR_WORK_DIR`` if set, else ``$TMPDIR/kfaws-emulator-<pid>``.
    It holds the local EFS file systems (``efs/<fs-id>/``), unpacked images
    (``images/<digest hex>/``), training jobs (``training/<account>/<region>/<job>/``)
    and endpoints (``endpoints/<account>/<region>/<endpoint>/``). Directories of
    emulators that no longer run (``kfaws-emulator-<pid>`` with a dead pid) are
    removed the first time a new emulator asks for its own.

Child processes
    Every training and serving process is started by one long-lived thread
    through ``setpriv --pdeathsig KILL``: when the emulator process ends, however
    it ends (SIGTERM, ``os._exit``, ``kill -9``), the kernel kills its children,
    so none is left behind. Each child leads its own process group, so a stop
    signal reaches anything it started too.

moto from threads
    Runner threads never touch moto's dicts themselves: ``in_moto(fn)`` queues
    ``fn`` on the lifecycle queue, which the server drains under its moto lock
    before it serves the next request (``lifecycle.py``). A client therefore sees
    a state change, a log event or an uploaded object on its next call, in the
    order the runner queued them.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..lifecycle import LIFECYCLE

_work_dir: Path | None = None
_work_dir_lock = threading.Lock()


def work_dir() -> Path:
    """The emulator's work directory (created on first use; see the module docstring)."""
    global _work_dir
    with _work_dir_lock:
        if _work_dir is None:
            configured = os.environ.get("KFAWS_EMULATOR_WORK_DIR")
            if configured:
                path = Path(configured).resolve()
            else:
                base = Path(tempfile.gettempdir())
                _sweep_stale(base)
                path = base / f"kfaws-emulator-{os.getpid()}"
            path.mkdir(parents=True, exist_ok=True)
            _work_dir = path
        return _work_dir


def _sweep_stale(base: Path) -> None:
    for entry in base.glob("kfaws-emulator-*"):
        match = re.fullmatch(r"kfaws-emulator-(\d+)", entry.name)
        if not match or not entry.is_dir() or int(match.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except PermissionError:
            pass


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def in_moto(fn: Callable[[], None]) -> None:
    """Runs ``fn`` under the moto lock before the next request is served (FIFO)."""
    LIFECYCLE.schedule(0.0, fn)


# --- child processes -------------------------------------------------------

_SETPRIV = shutil.which("setpriv")
_spawn_queue: queue.Queue = queue.Queue()
_children: set[subprocess.Popen] = set()
_children_lock = threading.Lock()
_spawner: threading.Thread | None = None


def _spawner_loop() -> None:
    while True:
        argv, kwargs, reply = _spawn_queue.get()
        try:
            reply.put(subprocess.Popen(argv, **kwargs))
        except BaseException as err:  # noqa: BLE001 - handed back to the caller
            reply.put(err)


def spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """Starts ``argv`` (``subprocess.Popen`` keyword arguments) as a child that dies with the emulator.

    Raises whatever ``Popen`` raises (``OSError`` for a missing or non-executable program).
    """
    global _spawner
    with _children_lock:
        if _spawner is None:
            # The parent-death signal fires when the *thread* that forked the
            # child ends, so children are forked from this thread only, which
            # lives as long as the process.
            _spawner = threading.Thread(target=_spawner_loop, name="kfaws-spawner", daemon=True)
            _spawner.start()
    if _SETPRIV:
        argv = [_SETPRIV, "--pdeathsig", "KILL", "--", *argv]
    kwargs.setdefault("start_new_session", True)
    reply: queue.Queue = queue.Queue()
    _spawn_queue.put((argv, kwargs, reply))
    result = reply.get()
    if isinstance(result, BaseException):
        raise result
    with _children_lock:
        _children.add(result)
    return result


def forget(proc: subprocess.Popen) -> None:
    """Drops an exited child from the registry."""
    with _children_lock:
        _children.discard(proc)


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Sends ``sig`` to the child's process group (it leads one), ignoring an already gone child."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


def terminate(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM, then SIGKILL after ``grace_s`` seconds if it still runs; waits for it."""
    signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        signal_group(proc, signal.SIGKILL)
        proc.wait()
    forget(proc)


def kill_all() -> int:
    """SIGKILLs every child still running (emulator reset); answers how many there were."""
    with _children_lock:
        children = list(_children)
        _children.clear()
    for proc in children:
        signal_group(proc, signal.SIGKILL)
    return len(children)


def running_children() -> list[int]:
    """Process ids of the children that still run."""
    with _children_lock:
        return [p.pid for p in _children if p.poll() is None]


_reset_hooks: list[Callable[[], None]] = []


def on_reset(hook: Callable[[], None]) -> None:
    """Runs ``hook`` when the emulator forgets all resources (``POST /_kfaws/reset``)."""
    _reset_hooks.append(hook)


def install_reset_hook() -> None:
    """Wraps moto's global reset so that local jobs and endpoints stop with their resources (once)."""
    from moto.moto_api._internal.models import MotoAPIBackend

    if getattr(MotoAPIBackend.reset, "_kfaws_local", False):
        return
    original = MotoAPIBackend.reset

    def reset(self) -> None:
        for hook in list(_reset_hooks):
            hook()
        kill_all()
        original(self)

    reset._kfaws_local = True  # type: ignore[attr-defined]
    MotoAPIBackend.reset = reset  # type: ignore[method-assign]


# --- moto's S3 and CloudWatch Logs, in process --------------------------------


class LocalError(Exception):
    """A failure of a local job, its message the ``FailureReason`` (``ClientError: ...``)."""


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> ``(bucket, key)``; raises LocalError for another form."""
    match = re.fullmatch(r"s3://([^/]+)/?(.*)", uri or "")
    if not match:
        raise LocalError(f"ClientError: {uri!r} is not an S3 URI (s3://bucket/prefix)")
    return match.group(1), match.group(2)


def s3_backend(account_id: str):
    from moto.s3.models import s3_backends

    return s3_backends[account_id]["aws"]


def s3_snapshot(account_id: str, uri: str) -> list[tuple[str, Any]]:
    """Under the moto lock: ``(key name, FakeKey)`` of every object under the ``s3://`` prefix.

    The FakeKeys are read later, outside the lock (each has its own lock).
    Raises LocalError naming a missing bucket.
    """
    from moto.s3.exceptions import MissingBucket
    from moto.s3.models import FakeKey

    bucket_name, prefix = parse_s3_uri(uri)
    try:
        bucket = s3_backend(account_id).get_bucket(bucket_name)
    except MissingBucket:
        raise LocalError(f"ClientError: the S3 bucket {bucket_name!r} of {uri} does not exist") from None
    return [
        (name, key)
        for name, key in sorted(bucket.keys.items())
        if name.startswith(prefix) and isinstance(key, FakeKey)
    ]


def s3_put(account_id: str, uri: str, body: bytes) -> None:
    """Under the moto lock: puts ``body`` at ``uri``; raises LocalError for a missing bucket."""
    from moto.s3.exceptions import MissingBucket

    bucket_name, key = parse_s3_uri(uri)
    try:
        s3_backend(account_id).put_object(bucket_name, key, body)
    except MissingBucket:
        raise LocalError(f"ClientError: the S3 bucket {bucket_name!r} of {uri} does not exist") from None


class LogSink:
    """Lines of one process: appended to a file at once, to a CloudWatch Logs stream on the next request."""

    def __init__(self, account_id: str, region: str, group: str, stream: str, path: Path) -> None:
        self.account_id, self.region, self.group, self.stream = account_id, region, group, stream
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self._scheduled = False
        self._created = False

    def write(self, line: str) -> None:
        line = line.rstrip("\n")
        with self._lock:
            if not self._file.closed:
                self._file.write(line + "\n")
                self._file.flush()
            self._pending.append({"timestamp": int(time.time() * 1000), "message": line})
            if not self._scheduled:
                self._scheduled = True
                in_moto(self._flush)

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def _flush(self) -> None:
        from moto.logs.exceptions import ResourceAlreadyExistsException
        from moto.logs.models import logs_backends

        with self._lock:
            events, self._pending, self._scheduled = self._pending, [], False
        backend = logs_backends[self.account_id][self.region]
        if not self._created:
            try:
                backend.create_log_group(self.group, {})
            except ResourceAlreadyExistsException:
                pass
            try:
                backend.create_log_stream(self.group, self.stream)
            except ResourceAlreadyExistsException:
                pass
            self._created = True
        # PutLogEvents takes at most 10,000 events per call.
        for start in range(0, len(events), 10_000):
            backend.put_log_events(self.group, self.stream, events[start : start + 10_000])


def pump_lines(
    proc: subprocess.Popen, sinks: list[Callable[[str], None]], on_eof: Callable[[], None] | None = None
) -> threading.Thread:
    """A thread that hands every line of ``proc.stdout`` to each of ``sinks``, then calls ``on_eof``."""

    def run() -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            for sink in sinks:
                sink(line)
        proc.stdout.close()
        if on_eof is not None:
            on_eof()

    thread = threading.Thread(target=run, name=f"kfaws-log-{proc.pid}", daemon=True)
    thread.start()
    return thread
