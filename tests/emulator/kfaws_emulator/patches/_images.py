"""Container images for the local runners: pulled from the emulator's registry, unpacked once per digest.

``unpacked(uri)`` resolves the image URI (``ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME[:TAG|@sha256:HEX]``)
to its manifest digest, and unpacks its layers (``registry.pull_layers``) into
``<work dir>/images/<hex>/rootfs`` the first time that digest is asked for. The
process a container would run is then found inside that root filesystem
(``program``): SageMaker runs a training image as ``docker run IMAGE train`` and a
serving image as ``docker run IMAGE serve``, keeping the image's ENTRYPOINT
(https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-training-algo-dockerfile.html,
https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-inference-code.html).

Local-only: the program runs as a plain process on this machine (no container,
no chroot), so it must be statically linked or find its shared libraries here.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ._local import LocalError, work_dir

_MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
    ]
)

_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


@dataclass
class Image:
    """An unpacked image: its digest, root filesystem and config (``config`` of the image config JSON)."""

    digest: str
    rootfs: Path
    config: dict = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """The image's ``Env`` as a dict."""
        return dict(item.split("=", 1) for item in self.config.get("Env") or [] if "=" in item)

    def program(self, entrypoint: list[str] | None, arguments: list[str]) -> list[str]:
        """The argv SageMaker would run: ``entrypoint`` (or the image's ENTRYPOINT) + ``arguments``,
        with the program resolved inside the root filesystem (absolute, or by the image's PATH).

        Raises LocalError when the image has no entrypoint or the program is not in it.
        """
        argv = list(entrypoint or self.config.get("Entrypoint") or [])
        if not argv:
            raise LocalError(f"ClientError: the image {self.digest} has no ENTRYPOINT to run")
        name = argv[0]
        if name.startswith("/"):
            candidates = [self.rootfs / name.lstrip("/")]
        else:
            path = self.env().get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            candidates = [self.rootfs / d.lstrip("/") / name for d in path.split(":") if d]
        for candidate in candidates:
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return [str(candidate), *argv[1:], *arguments]
        raise LocalError(f"ClientError: the image {self.digest} has no executable {name!r} (entrypoint {argv})")


def _registry():
    try:
        from .. import registry  # helper module of the ECR patch: the local docker-registry
    except ImportError:
        raise LocalError("ClientError: this emulator has no container registry (kfaws_emulator.registry)") from None
    current = registry.current()
    if current is None:
        raise LocalError("ClientError: the emulator's container registry is not running (docker-registry missing?)")
    return registry, current


def resolve_digest(uri: str) -> str:
    """``sha256:HEX`` of the image's manifest: the URI's own digest, or the tag's, asked from the registry."""
    registry, current = _registry()
    try:
        name, reference = registry.split_image_uri(uri)
    except ValueError as err:
        raise LocalError(f"ClientError: {err}") from None
    if reference.startswith("sha256:"):
        return reference
    request = urllib.request.Request(f"{current.url}/v2/{name}/manifests/{reference}", method="HEAD")
    request.add_header("Accept", _MANIFEST_TYPES)
    request.add_header("Authorization", current.authorization())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            digest = response.headers.get("Docker-Content-Digest")
    except urllib.error.HTTPError as err:
        raise LocalError(f"ClientError: cannot find the image {uri} in the registry (HTTP {err.code})") from None
    if not digest:
        raise LocalError(f"ClientError: the registry gave no digest for {uri}")
    return digest


def _pinned(uri: str, digest: str) -> str:
    """``uri`` with its tag replaced by ``@digest``, so the layers pulled are those resolved."""
    if "@" in uri:
        return uri
    head, _, last = uri.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}@{digest}"


def unpacked(uri: str) -> Image:
    """The image ``uri`` unpacked under the work dir (pulled once per digest; concurrent callers wait)."""
    registry, _ = _registry()
    digest = resolve_digest(uri)
    hex_digest = digest.split(":", 1)[1]
    with _locks_lock:
        lock = _locks.setdefault(hex_digest, threading.Lock())
    base = work_dir() / "images" / hex_digest
    with lock:
        if not (base / "config.json").is_file():
            tmp = base.with_name(f"{hex_digest}.partial")
            shutil.rmtree(tmp, ignore_errors=True)
            (tmp / "rootfs").mkdir(parents=True)
            try:
                config = registry.pull_layers(_pinned(uri, digest), tmp / "rootfs")
            except LocalError:
                raise
            except Exception as err:  # noqa: BLE001 - any pull failure fails the job, with its reason
                shutil.rmtree(tmp, ignore_errors=True)
                raise LocalError(f"ClientError: cannot pull the image {uri}: {err}") from None
            (tmp / "config.json").write_text(json.dumps(config))
            shutil.rmtree(base, ignore_errors=True)
            tmp.rename(base)
        config = json.loads((base / "config.json").read_text())
    # pull_layers returns the image config JSON; the container settings are under "config".
    return Image(digest=digest, rootfs=base / "rootfs", config=config.get("config") or {})
