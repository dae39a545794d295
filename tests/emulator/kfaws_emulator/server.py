"""The emulator's WSGI application: moto's server behind our middleware.

Every request goes through, in order:

1. the control API, for paths under ``/_kfaws/`` (see ``control.py``);
2. account selection: a request without an ``x-moto-account-id`` header whose
   SigV4 access key id is 12 digits is served from that account, so a test
   isolates itself with nothing but ``AWS_ACCESS_KEY_ID=<account id>``; keys
   issued by moto's STS (``ASIA...``) keep moto's own lookup; any other key
   is served from the default account ``123456789012``;
3. the call log and the fault rules (``faults.py``), by service and operation;
4. due lifecycle transitions (``lifecycle.py``), then moto itself.

moto's backends are plain dicts mutated without locks, so step 4 runs under
one process-wide lock; injected latency is slept before taking it, so delayed
calls still overlap as they would against AWS.
"""

from __future__ import annotations

import io
import os
import threading
import time
from collections import Counter
from http import HTTPStatus

from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from . import control
from .faults import FaultRules
from .lifecycle import LIFECYCLE
from .operations import ACCOUNT_ID, identify
from .patches import cfn_update_rollback_failed, eks_cluster_endpoint
from .patches._common import thread_state

CONTROL_PREFIX = "/_kfaws/"


class CallLog:
    """Counts of calls that reached the emulator, by account, service and operation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: Counter = Counter()
        self._faulted: Counter = Counter()

    def record(self, account: str, service: str, operation: str, faulted: bool) -> None:
        with self._lock:
            self._calls[(account, service, operation)] += 1
            if faulted:
                self._faulted[(account, service, operation)] += 1

    def snapshot(self, account: str | None = None) -> list[dict]:
        with self._lock:
            return [
                {
                    "account_id": a,
                    "service": s,
                    "operation": o,
                    "calls": n,
                    "faulted": self._faulted[(a, s, o)],
                }
                for (a, s, o), n in sorted(self._calls.items())
                if account in (None, a)
            ]

    def clear(self) -> None:
        with self._lock:
            self._calls.clear()
            self._faulted.clear()


class EmulatorApp:
    """WSGI callable; ``state`` is shared with the control API."""

    def __init__(self) -> None:
        self.moto = DomainDispatcherApplication(create_backend_app)
        self.faults = FaultRules()
        self.calls = CallLog()
        self.lifecycle = LIFECYCLE
        self.moto_lock = threading.RLock()
        self.warm = False

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO", "").startswith(CONTROL_PREFIX):
            return control.handle(self, environ, start_response)

        if environ.get("CONTENT_LENGTH"):
            body = environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"]))
        elif "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
            # werkzeug has already de-chunked the stream; hand moto a plain body.
            body = environ["wsgi.input"].read()
            environ.pop("HTTP_TRANSFER_ENCODING")
        else:
            body = b""
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))

        op = identify(environ, body)
        if "HTTP_X_MOTO_ACCOUNT_ID" not in environ:
            if op.access_key and ACCOUNT_ID.match(op.access_key):
                environ["HTTP_X_MOTO_ACCOUNT_ID"] = op.access_key
            elif not (op.access_key or "").startswith("ASIA"):
                # moto would search every account's IAM users for this key,
                # building each account's IAM backend (0.25 s apiece with the
                # managed policies); only STS-issued keys (ASIA...) can be
                # found there, so any other key gets the default account.
                environ["HTTP_X_MOTO_ACCOUNT_ID"] = DEFAULT_ACCOUNT_ID
        account = os.environ.get("MOTO_ACCOUNT_ID") or environ.get("HTTP_X_MOTO_ACCOUNT_ID") or DEFAULT_ACCOUNT_ID

        decision = self.faults.decide(op, account)
        self.calls.record(account, op.service, op.operation, decision.error is not None)
        if decision.latency_s:
            time.sleep(decision.latency_s)
        if decision.error is not None:
            status, headers, payload = decision.error
            headers = headers + [("Content-Length", str(len(payload)))]
            start_response(f"{status} {_reason(status)}", headers)
            return [payload]

        with self.moto_lock:
            # Patches that need the caller (eks_cluster_endpoint records a
            # cluster's creator) read it here; moto's methods do not get it.
            thread_state().access_key = op.access_key
            self.lifecycle.advance()
            # Drain moto's response inside the lock: Flask bodies can be lazy.
            return list(self.moto(environ, start_response))

    def reset(self) -> None:
        """Forgets every resource in every account, every fault and rollback-failure rule, call and lifecycle setting."""
        from moto.moto_api._internal.models import moto_api_backend

        with self.moto_lock:
            moto_api_backend.reset()
            self.faults.clear()
            self.calls.clear()
            self.lifecycle.reset()
            eks_cluster_endpoint.reset()
            cfn_update_rollback_failed.reset()


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"
