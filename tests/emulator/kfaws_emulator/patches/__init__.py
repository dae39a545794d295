"""Our patches to moto: each module restores one real-AWS behaviour moto lacks.

Each module has an ``apply()`` that installs it by wrapping moto methods, a
docstring naming the AWS documentation it follows, and a test in
``tests/emulator/tests/``. The list, with the reasons, is in README.md.
"""

from __future__ import annotations

import importlib

MODULES = ()

_applied = False


def apply_all() -> None:
    """Installs every patch once (idempotent)."""
    global _applied
    if _applied:
        return
    for name in MODULES:
        importlib.import_module(f"{__name__}.{name}").apply()
    _applied = True
