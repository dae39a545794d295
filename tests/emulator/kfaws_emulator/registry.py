"""A real container registry on loopback, behind the emulated ECR.

ECR serves the Docker Registry HTTP API V2 at a registry endpoint
(``https://ACCOUNT.dkr.ecr.REGION.amazonaws.com``) with HTTP Basic auth: user
``AWS``, password the token that ``GetAuthorizationToken`` answers
(https://docs.aws.amazon.com/AmazonECR/latest/userguide/registry_auth.html).
moto 5.2.5 emulates the ECR API only; nothing listens at that endpoint.

This module starts Debian's ``docker-registry`` (the CNCF Distribution
registry, package ``docker-registry`` 2.8.2) as a child of the emulator, on a
free ``127.0.0.1`` port, with htpasswd Basic auth for user ``AWS`` and a
random password per emulator run. ``patches/ecr_authorization_token.py``
hands out exactly those credentials and this URL as ``proxyEndpoint``, so a
client that pushes to ECR the documented way pushes to this registry.

- Lazily started, once, by the first ``current()`` (the emulator's start-up
  stays as fast as before for runs that never touch ECR).
- Nothing touches the disk: the registry keeps blobs in memory (storage
  driver ``inmemory``), and its config and htpasswd file are anonymous memory
  files (``memfd``) handed to it as ``/proc/self/fd/N``.
- Stopped with the emulator, however the emulator ends: the child runs under
  ``setpriv --pdeathsig TERM`` from a thread that lives as long as the
  emulator process (the parent-death signal follows the creating thread).
- Without ``docker-registry`` (or ``htpasswd``, from ``apache2-utils``, for
  the bcrypt hash the registry requires) ``current()`` is None and the
  emulator works as before; ``GetAuthorizationToken`` still answers.

Consumers: the ECR patch and ``GET /_kfaws/ecr/registry`` (control API);
the SageMaker runner pulls images with ``pull_layers``.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

USERNAME = "AWS"
"""The Basic auth user name ECR uses (registry_auth.html)."""

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
START_TIMEOUT_S = 15.0
HTTP_TIMEOUT_S = 120.0

# ACCOUNT.dkr.ecr.REGION.amazonaws.com (or .amazonaws.com.cn), the ECR registry host.
_ECR_HOST = re.compile(r"^\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?$")
# Distribution reference grammar (distribution/reference/regexp.go): path
# components, tag, digest.
_NAME = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")


class RegistryError(RuntimeError):
    """The registry could not serve an image (the message says which request and why)."""


@dataclass(frozen=True)
class Registry:
    """The running registry: ``url`` (``http://127.0.0.1:PORT``) and its Basic auth credentials."""

    url: str
    username: str
    password: str = field(repr=False)
    metrics_url: str | None = None
    """The registry's Prometheus metrics (``registry_http_requests_total`` by handler, method and code)."""
    process: subprocess.Popen | None = field(default=None, repr=False, compare=False)
    """The child process, when this emulator started it."""

    def authorization(self) -> str:
        """The ``Authorization`` header value for this registry."""
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()

    def as_json(self) -> dict:
        """What ``GET /_kfaws/ecr/registry`` answers."""
        return {"url": self.url, "username": self.username, "password": self.password, "metrics_url": self.metrics_url}


_lock = threading.Lock()
_started = threading.Event()
_registry: Registry | None = None
_attempted = False


def _log(message: str) -> None:
    print(f"kfaws_emulator: registry: {message}", file=sys.stderr, flush=True)


def _memfd(name: str, data: bytes) -> int:
    """An anonymous in-memory file holding ``data``, inheritable by a child (no CLOEXEC)."""
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ping(url: str) -> int | None:
    """Status of an unauthenticated ``GET /v2/`` (401 once the registry is up), None if unreachable."""
    try:
        with urllib.request.urlopen(f"{url}/v2/", timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return None


# Routine answers the registry logs at level error: a HEAD for a blob it
# lacks (every push asks), the 401 challenge, a wrong password.
_ROUTINE = ("http.response.status=4", "authentication failure", "level=warning")


def _forward_log(stream) -> None:
    """Copies the registry's log to the emulator's standard error, less the routine client errors."""
    for raw in stream:
        line = raw.decode(errors="replace").rstrip()
        if not any(r in line for r in _ROUTINE):
            _log(line)


def _launch() -> Registry | None:
    """Starts the registry and waits until it answers; None (with a log line) if it cannot."""
    binary, htpasswd = shutil.which("docker-registry"), shutil.which("htpasswd")
    if binary is None or htpasswd is None:
        _log("docker-registry or htpasswd not installed (Debian: docker-registry apache2-utils); no registry")
        return None
    password = secrets.token_urlsafe(24)
    # bcrypt is the only hash the registry's htpasswd auth accepts; -i reads
    # the password from stdin so it never shows in a process listing.
    hashed = subprocess.run(
        [htpasswd, "-niB", USERNAME], input=password.encode(), capture_output=True, check=True
    ).stdout
    port, debug_port = _free_port(), _free_port()
    htpasswd_fd = _memfd("kfaws-registry-htpasswd", hashed)
    config = {
        "version": "0.1",
        "log": {"level": "error", "accesslog": {"disabled": True}},
        "storage": {"inmemory": {}, "delete": {"enabled": True}},
        "http": {
            "addr": f"127.0.0.1:{port}",
            "secret": secrets.token_hex(16),
            # Request counters, so tests can see which requests a client made.
            "debug": {"addr": f"127.0.0.1:{debug_port}", "prometheus": {"enabled": True, "path": "/metrics"}},
        },
        "auth": {"htpasswd": {"realm": "kfaws-emulator-ecr", "path": f"/proc/self/fd/{htpasswd_fd}"}},
    }
    # JSON is YAML: the registry reads it as its config file.
    config_fd = _memfd("kfaws-registry-config", json.dumps(config).encode())
    command = [binary, "serve", f"/proc/self/fd/{config_fd}"]
    if shutil.which("setpriv"):
        command = ["setpriv", "--pdeathsig", "TERM", "--", *command]
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(htpasswd_fd, config_fd),
        )
    finally:
        os.close(htpasswd_fd)
        os.close(config_fd)
    threading.Thread(target=_forward_log, args=(process.stdout,), name="kfaws-registry-log", daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while _ping(url) != 401:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            _log(f"docker-registry did not come up on {url} (exit status {process.returncode})")
            return None
        time.sleep(0.05)
    _log(f"serving {url} (user {USERNAME}, in-memory storage)")
    metrics = f"http://127.0.0.1:{debug_port}/metrics"
    return Registry(url=url, username=USERNAME, password=password, metrics_url=metrics, process=process)


def _own() -> None:
    """The owner thread: starts the registry, then lives as long as it (see the module docstring)."""
    global _registry
    try:
        _registry = _launch()
    except Exception as err:  # noqa: BLE001 - any failure means "no registry", reported once
        _log(f"cannot start docker-registry: {err}")
    finally:
        _started.set()
    if _registry is not None:
        status = _registry.process.wait()
        _log(f"docker-registry exited with status {status}")


def current() -> Registry | None:
    """The emulator's registry, started on first use; None when it is not available."""
    global _attempted
    with _lock:
        if not _attempted:
            _attempted = True
            threading.Thread(target=_own, name="kfaws-registry", daemon=True).start()
    _started.wait()
    registry = _registry
    if registry is not None and registry.process is not None and registry.process.poll() is not None:
        return None
    return registry


def control_answer() -> tuple[dict, int]:
    """Body and status of ``GET /_kfaws/ecr/registry``: the URL and credentials, or 404."""
    registry = current()
    if registry is None:
        return {"error": "no registry: docker-registry (Debian package) is not installed or did not start"}, 404
    return registry.as_json(), 200


def split_image_uri(uri: str) -> tuple[str, str]:
    """``(repository_name, reference)`` of an ECR image URI.

    ``ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME[:TAG|@sha256:HEX]`` (a
    ``repositoryUri`` with an optional tag or digest, as SageMaker's
    ``TrainingImage``); the registry host may also be omitted or be this
    registry's ``127.0.0.1:PORT``. The reference is the tag, the digest, or
    ``latest``. Raises ValueError naming what is wrong.
    """
    rest = uri.strip()
    first, _, after = rest.partition("/")
    if after and ("." in first or ":" in first or first == "localhost"):
        if not (_ECR_HOST.match(first) or first.startswith(("127.0.0.1:", "localhost:"))):
            raise ValueError(f"image {uri!r}: registry host {first!r} is neither ECR's nor loopback")
        rest = after
    if "@" in rest:
        name, reference = rest.split("@", 1)
        if not _DIGEST.match(reference):
            raise ValueError(f"image {uri!r}: digest {reference!r} is not sha256:<64 hex>")
    else:
        name, colon, tag = rest.rpartition(":")
        if not colon or "/" in tag:
            name, reference = rest, "latest"
        else:
            reference = tag
            if not _TAG.match(reference):
                raise ValueError(f"image {uri!r}: tag {reference!r} breaks [A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}")
    if not _NAME.match(name):
        raise ValueError(f"image {uri!r}: repository name {name!r} is not a valid lowercase repository path")
    return name, reference


def _get(registry: Registry, path: str, accept: str | None = None) -> tuple[bytes, dict]:
    request = urllib.request.Request(f"{registry.url}{path}")
    request.add_header("Authorization", registry.authorization())
    if accept:
        request.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return response.read(), dict(response.headers)
    except urllib.error.HTTPError as err:
        raise RegistryError(f"GET {path}: HTTP {err.code}: {err.read()[:300].decode(errors='replace')}") from None
    except OSError as err:
        raise RegistryError(f"GET {path}: {err}") from None


def _blob(registry: Registry, name: str, digest: str) -> bytes:
    if not _DIGEST.match(digest or ""):
        raise RegistryError(f"{name}: descriptor digest {digest!r} is not sha256:<64 hex>")
    data, _ = _get(registry, f"/v2/{name}/blobs/{digest}")
    actual = "sha256:" + hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise RegistryError(f"{name}: blob {digest} has digest {actual}")
    return data


def _unpack(layer: bytes, dest: Path) -> None:
    """Applies one layer to ``dest``: whiteouts remove, everything else is extracted.

    Whiteouts per the OCI image spec ("Representing Changes in Filesystem
    Layers"): ``.wh.NAME`` deletes NAME, ``.wh..wh..opq`` empties its
    directory. tarfile's ``tar`` filter refuses paths that leave ``dest``.
    """
    if layer[:2] == b"\x1f\x8b":
        layer = gzip.decompress(layer)
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = []
        for member in tar.getmembers():
            parent, _, base = member.name.rpartition("/")
            if base == ".wh..wh..opq":
                target = dest / parent
                for child in target.iterdir() if target.is_dir() else ():
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
            elif base.startswith(".wh."):
                target = dest / parent / base[len(".wh.") :]
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                elif target.exists() or target.is_symlink():
                    target.unlink()
            else:
                members.append(member)
        tar.extractall(dest, members=members, filter="tar")


def pull_layers(uri: str, dest_dir, registry: Registry | None = None) -> dict:
    """Pulls image ``uri`` from the emulator's registry and unpacks its layers, in order, into ``dest_dir``.

    Gets the manifest (Docker v2 schema 2 or OCI; a digest reference is
    checked against the manifest's sha256), every layer blob and the config
    blob (each checked against its descriptor's digest). Returns the image
    config (JSON). ``registry`` defaults to ``current()``. Raises ValueError
    for a malformed URI, RegistryError when there is no registry or a
    request or check fails.
    """
    name, reference = split_image_uri(uri)
    registry = registry or current()
    if registry is None:
        raise RegistryError("no registry: docker-registry (Debian package) is not installed or did not start")
    manifest_bytes, headers = _get(registry, f"/v2/{name}/manifests/{reference}", f"{DOCKER_MANIFEST}, {OCI_MANIFEST}")
    if reference.startswith("sha256:"):
        actual = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
        if actual != reference:
            raise RegistryError(f"{name}: manifest {reference} has digest {actual}")
    manifest = json.loads(manifest_bytes)
    media_type = manifest.get("mediaType") or headers.get("Content-Type", "")
    if media_type not in (DOCKER_MANIFEST, OCI_MANIFEST):
        raise RegistryError(f"{name}:{reference}: manifest media type {media_type!r} is not an image manifest")
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    for descriptor in manifest.get("layers", []):
        _unpack(_blob(registry, name, descriptor.get("digest")), dest)
    return json.loads(_blob(registry, name, manifest["config"]["digest"]))
