"""Helpers shared by the patches: method wrapping and the "inside CloudFormation" flag."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_local = threading.local()


def wrap(owner: Any, name: str, make: Callable[[Callable], Callable]) -> None:
    """Replaces ``owner.name`` with ``make(original)``, keeping the original's metadata.

    For a classmethod or staticmethod, ``original`` is the bound callable and
    ``make``'s result is installed as a staticmethod.
    """
    static = inspect.getattr_static(owner, name)
    original = getattr(owner, name)
    replacement = functools.update_wrapper(make(original), original)
    if isinstance(static, (classmethod, staticmethod)):
        replacement = staticmethod(replacement)
    setattr(owner, name, replacement)


def argument(function: Callable, name: str, args: tuple, kwargs: dict) -> Any:
    """The value ``function(*args, **kwargs)`` binds to parameter ``name``."""
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments[name]


@contextmanager
def inside_cloudformation() -> Iterator[None]:
    """Marks resource calls made by CloudFormation itself.

    Per-resource lifecycle latencies do not apply to them: the stack's own
    duration stands for the whole stack operation, and moto creates a
    stack's resources in one pass.
    """
    depth = getattr(_local, "cfn_depth", 0)
    _local.cfn_depth = depth + 1
    try:
        yield
    finally:
        _local.cfn_depth = depth


def in_cloudformation() -> bool:
    return getattr(_local, "cfn_depth", 0) > 0


def error_text(err: BaseException) -> str:
    """``Code: message`` of a moto error, as CloudFormation reports a resource's failure."""
    code = getattr(err, "error_type", None) or type(err).__name__
    message = getattr(err, "message", None) or str(err)
    return f"{message} (Service error code: {code})"


def thread_state() -> threading.local:
    """Per-request scratch space (a request is served by one thread, under the moto lock)."""
    return _local
