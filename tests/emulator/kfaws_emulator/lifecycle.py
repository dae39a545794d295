"""Lifecycle latencies: how long resources stay in their transitional states.

moto creates and deletes everything at once; real AWS resources pass through
CREATING / DELETING (EKS), creating / deleting (EFS), pending / deleting (NAT
gateways) and *_IN_PROGRESS (CloudFormation) first. The patches put a
resource in its transitional state and ``schedule`` the transition to the
final one; ``advance`` applies every transition that is due. The server calls
``advance`` before it hands each request to moto, so state changes when a
client looks, as it does in AWS, and no background thread touches moto.

The duration of a transition is ``durations[key] * scale`` seconds. The
default durations are the typical wall times of the real services, rounded
(EKS user guide: a cluster takes "several minutes", node groups a few
minutes; EFS and NAT gateways: about a minute or less). The default scale is
0 (moto's instant behaviour); ``make bench`` sets e.g. 0.01, so a 600 s EKS
cluster takes 6 s.
"""

from __future__ import annotations

import heapq
import logging
import itertools
import threading
import time
from collections.abc import Callable

DEFAULT_DURATIONS: dict[str, float] = {
    "eks.cluster.create": 600.0,
    "eks.cluster.delete": 300.0,
    "eks.cluster.update": 600.0,
    "eks.nodegroup.create": 180.0,
    "eks.nodegroup.delete": 180.0,
    "eks.nodegroup.update": 600.0,
    "efs.filesystem.create": 5.0,
    "efs.filesystem.delete": 5.0,
    "efs.mounttarget.create": 90.0,
    "efs.mounttarget.delete": 60.0,
    "ec2.natgateway.create": 90.0,
    "ec2.natgateway.delete": 60.0,
    "cloudformation.stack.create": 30.0,
    "cloudformation.stack.update": 30.0,
    "cloudformation.stack.delete": 30.0,
}


_log = logging.getLogger(__name__)


class LifecycleError(ValueError):
    """A rejected lifecycle setting; the message names the field and the rule."""


class Lifecycle:
    """Configured durations (global, or per account) plus the queue of pending transitions."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._global = (0.0, dict(DEFAULT_DURATIONS))
        self._accounts: dict[str, tuple[float, dict[str, float]]] = {}
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def configure(self, data: dict, account_id: str | None = None) -> None:
        """Merges ``{"scale": s, "durations": {key: seconds}}`` into the settings.

        With ``account_id`` the settings apply to that account only (starting
        from the global ones), so concurrent tests in other accounts are not
        slowed down.
        """
        if not isinstance(data, dict) or set(data) - {"scale", "durations"}:
            raise LifecycleError('lifecycle settings are a JSON object with keys "scale" and/or "durations"')
        durations = data.get("durations", {})
        if not isinstance(durations, dict):
            raise LifecycleError('"durations" must be an object of key -> seconds')
        for key, value in durations.items():
            if key not in DEFAULT_DURATIONS:
                raise LifecycleError(f"unknown lifecycle key {key!r}; known: {sorted(DEFAULT_DURATIONS)}")
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise LifecycleError(f"duration {key!r} must be a non-negative number of seconds")
        with self._lock:
            scale, current = self._accounts.get(account_id, self._global) if account_id else self._global
            scale = data.get("scale", scale)
            if not isinstance(scale, (int, float)) or isinstance(scale, bool) or scale < 0:
                raise LifecycleError('"scale" must be a non-negative number')
            merged = {**current, **{k: float(v) for k, v in durations.items()}}
            if account_id:
                self._accounts[account_id] = (float(scale), merged)
            else:
                self._global = (float(scale), merged)

    def reset(self) -> None:
        with self._lock:
            self._global = (0.0, dict(DEFAULT_DURATIONS))
            self._accounts.clear()
            self._queue.clear()

    def settings(self, account_id: str | None = None) -> dict:
        with self._lock:
            scale, durations = self._accounts.get(account_id, self._global) if account_id else self._global
            return {
                "account_id": account_id,
                "scale": scale,
                "durations": dict(durations),
                "effective_seconds": {k: v * scale for k, v in durations.items()},
                "pending_transitions": len(self._queue),
            }

    def duration(self, key: str, account_id: str) -> float:
        """Seconds that transition ``key`` takes now in ``account_id`` (0: instant, moto's behaviour)."""
        with self._lock:
            scale, durations = self._accounts.get(account_id, self._global)
            return durations[key] * scale

    def schedule(self, seconds: float, transition: Callable[[], None]) -> None:
        """Runs ``transition`` at the first ``advance`` at least ``seconds`` from now."""
        with self._lock:
            heapq.heappush(self._queue, (time.monotonic() + seconds, next(self._seq), transition))

    def advance(self) -> None:
        """Applies every due transition, oldest deadline first."""
        now = time.monotonic()
        while True:
            with self._lock:
                if not self._queue or self._queue[0][0] > now:
                    return
                _, _, transition = heapq.heappop(self._queue)
            try:
                transition()
            except Exception:  # one broken transition must not stall the others
                _log.exception("lifecycle transition failed")


LIFECYCLE = Lifecycle()
