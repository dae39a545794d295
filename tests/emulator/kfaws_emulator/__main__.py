"""Launcher: ``python -m kfaws_emulator [--port 0] [--ready-file PATH] ...``.

Starts the emulator on loopback, warms it up, then writes the ready file
(atomically: a reader never sees half of it), one ``KEY=value`` per line so
that a shell can ``source`` it and Rust can split lines on ``=``::

    KFAWS_EMULATOR_ENDPOINT=http://127.0.0.1:41234
    KFAWS_EMULATOR_CONTROL=http://127.0.0.1:41234/_kfaws
    KFAWS_EMULATOR_PID=12345
    AWS_ENDPOINT_URL=http://127.0.0.1:41234

It runs until SIGTERM or SIGINT, or, with ``--exit-on-stdin-eof``, until its
standard input closes (the parent died or dropped the pipe), so a test
harness that is killed leaves no emulator behind. On exit it removes the
ready file. Exit status: 0 after a clean stop, 2 on bad arguments, 1 when the
server could not start or warm up.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m kfaws_emulator", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="TCP port; 0 picks a free one (default)")
    parser.add_argument("--ready-file", help="write KEY=value lines here once the emulator answers")
    parser.add_argument("--no-warmup", action="store_true", help="skip the warm-up calls")
    parser.add_argument(
        "--no-patches",
        action="store_true",
        help="serve moto unpatched (to show which tests fail without the patches)",
    )
    parser.add_argument(
        "--skip-patch",
        action="append",
        default=[],
        metavar="NAME",
        help="serve without one patch (repeatable), to show which tests it makes pass",
    )
    parser.add_argument(
        "--lifecycle",
        help='lifecycle settings as JSON, e.g. \'{"scale": 0.01}\' (see /_kfaws/lifecycle)',
    )
    parser.add_argument("--access-log", action="store_true", help="log every request to standard error")
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help="stop when standard input closes")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be 0-65535, got {args.port}")
    if not (args.host.startswith("127.") or args.host in ("::1", "localhost")):
        parser.error(f"--host must be a loopback address (127.0.0.0/8, ::1, localhost), got {args.host!r}")
    return args


def _quiet_handler():
    from moto.moto_server.werkzeug_app import MotoRequestHandler

    class QuietHandler(MotoRequestHandler):
        def log_request(self, *args, **kwargs) -> None:
            pass

    return QuietHandler


def _write_ready(path: str, lines: dict[str, str]) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in lines.items())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    args = _parse(sys.argv[1:] if argv is None else argv)
    # Read by moto when each account's IAM backend is first built.
    os.environ["MOTO_IAM_LOAD_MANAGED_POLICIES"] = "true"

    from werkzeug.serving import make_server

    from moto.moto_server.werkzeug_app import MotoRequestHandler

    from . import patches
    from .lifecycle import LIFECYCLE, LifecycleError
    from .server import EmulatorApp
    from .warmup import warm_up

    if args.lifecycle:
        try:
            LIFECYCLE.configure(json.loads(args.lifecycle))
        except (json.JSONDecodeError, LifecycleError) as err:
            print(f"kfaws_emulator: --lifecycle: {err}", file=sys.stderr)
            return 2
    if not args.no_patches:
        try:
            patches.apply_all(skip=tuple(args.skip_patch))
        except ValueError as err:
            print(f"kfaws_emulator: --skip-patch: {err}", file=sys.stderr)
            return 2

    app = EmulatorApp()
    handler = MotoRequestHandler if args.access_log else _quiet_handler()
    try:
        server = make_server(args.host, args.port, app, threaded=True, request_handler=handler)
    except OSError as err:
        print(f"kfaws_emulator: cannot listen on {args.host}:{args.port}: {err}", file=sys.stderr)
        return 1
    host, port = server.server_address[:2]
    endpoint = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
    thread = threading.Thread(target=server.serve_forever, name="kfaws-emulator", daemon=True)
    thread.start()

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.exit_on_stdin_eof:
        stdin_fd = sys.stdin.fileno()

        def watch_stdin() -> None:
            # os.read, not sys.stdin: a buffered reader's lock held by this
            # daemon thread would abort the interpreter at exit.
            while os.read(stdin_fd, 4096):
                pass
            stop.set()

        threading.Thread(target=watch_stdin, name="stdin-eof", daemon=True).start()

    listening = time.monotonic()
    try:
        if not args.no_warmup:
            warm_up(endpoint)
    except Exception as err:  # noqa: BLE001 - any warm-up failure means the emulator is unusable
        print(f"kfaws_emulator: warm-up against {endpoint} failed: {err}", file=sys.stderr)
        server.shutdown()
        return 1
    app.warm = True
    ready = time.monotonic()
    print(
        f"kfaws_emulator: {endpoint} ready (listening {listening - started:.2f}s after start, "
        f"warm-up {ready - listening:.2f}s)",
        file=sys.stderr,
        flush=True,
    )
    if args.ready_file:
        _write_ready(
            args.ready_file,
            {
                "KFAWS_EMULATOR_ENDPOINT": endpoint,
                "KFAWS_EMULATOR_CONTROL": f"{endpoint}/_kfaws",
                "KFAWS_EMULATOR_PID": str(os.getpid()),
                "AWS_ENDPOINT_URL": endpoint,
            },
        )
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        if args.ready_file:
            try:
                os.remove(args.ready_file)
            except FileNotFoundError:
                pass
    return 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter finalization: tearing down moto's object graph takes
    # seconds and there is nothing left to release.
    os._exit(status)
