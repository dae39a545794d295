"""ECR GetAuthorizationToken hands out credentials of a real registry on loopback.

Patch ``ecr_authorization_token`` and ``kfaws_emulator/registry.py``: the
token decodes to ``AWS:<password>``, the registry at ``proxyEndpoint``
accepts exactly those credentials (Docker Registry HTTP API V2 ``GET /v2/``),
and an image pushed over plain HTTP comes back through ``pull_layers``.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import hashlib
import io
import json
import shutil
import tarfile
import urllib.error
import urllib.request

import pytest

from kfaws_emulator import registry

needs_registry = pytest.mark.skipif(
    shutil.which("docker-registry") is None or shutil.which("htpasswd") is None,
    reason="Debian packages docker-registry and apache2-utils (make deps) are not installed",
)


def _request(url: str, method: str = "GET", auth: str | None = None, data: bytes | None = None, headers=None):
    request = urllib.request.Request(url, data=data, method=method)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    for k, v in (headers or {}).items():
        request.add_header(k, v)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def _token(aws):
    data = aws("ecr").get_authorization_token()["authorizationData"]
    assert len(data) == 1
    return data[0]


@needs_registry
def test_the_token_decodes_to_credentials_the_registry_at_proxy_endpoint_accepts(aws, control):
    data = _token(aws)
    user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    assert user == "AWS"
    status, body = control.call("GET", "/ecr/registry")
    assert status == 200, body
    assert data["proxyEndpoint"] == body["url"]
    assert (user, password) == (body["username"], body["password"])
    assert data["proxyEndpoint"].startswith("http://127.0.0.1:")

    status, headers, _ = _request(f"{data['proxyEndpoint']}/v2/", auth=f"{user}:{password}")
    assert status == 200
    assert headers.get("Docker-Distribution-Api-Version") == "registry/2.0"


@needs_registry
def test_wrong_or_missing_credentials_are_401(aws):
    data = _token(aws)
    _, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    url = f"{data['proxyEndpoint']}/v2/"
    for auth in (None, f"AWS:{password}x", f"root:{password}"):
        status, headers, _ = _request(url, auth=auth)
        assert status == 401, auth
        assert headers.get("WWW-Authenticate", "").startswith("Basic realm="), headers


def test_the_token_expires_in_12_hours(aws):
    data = _token(aws)
    expires = data["expiresAt"]
    left = expires - dt.datetime.now(dt.timezone.utc)
    assert dt.timedelta(hours=11, minutes=59) < left <= dt.timedelta(hours=12), expires


def _layer(files: dict[str, bytes], whiteouts=()) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(content))
        for name in whiteouts:
            tar.addfile(tarfile.TarInfo(name), io.BytesIO(b""))
    return gzip.compress(buffer.getvalue(), mtime=0)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _push_blob(base: str, auth: str, name: str, blob: bytes) -> None:
    status, headers, body = _request(f"{base}/v2/{name}/blobs/uploads/", "POST", auth, b"")
    assert status == 202, body
    location = headers["Location"]
    location = location if location.startswith("http") else base + location
    separator = "&" if "?" in location else "?"
    status, _, body = _request(
        f"{location}{separator}digest={_digest(blob)}",
        "PUT",
        auth,
        blob,
        {"Content-Type": "application/octet-stream"},
    )
    assert status == 201, body


@needs_registry
def test_an_image_pushed_over_http_is_pulled_back_layer_by_layer(aws, account_id, control, tmp_path):
    data = _token(aws)
    # pull_layers runs in the emulator's process; here it is given the
    # emulator's registry (this process has none of its own).
    _, answer = control.call("GET", "/ecr/registry")
    reg = registry.Registry(url=answer["url"], username=answer["username"], password=answer["password"])
    base = data["proxyEndpoint"]
    auth = base64.b64decode(data["authorizationToken"]).decode()
    name = f"test-{account_id}/pull"
    first = _layer({"usr/local/bin/tool": b"#!/bin/sh\necho one\n", "etc/old.conf": b"old"})
    second = _layer({"usr/local/bin/tool": b"#!/bin/sh\necho two\n"}, whiteouts=["etc/.wh.old.conf"])
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Entrypoint": ["/usr/local/bin/tool"]}})
    config = config.encode()
    for blob in (first, second, config):
        _push_blob(base, auth, name, blob)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": registry.DOCKER_MANIFEST,
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": _digest(config),
            },
            "layers": [
                {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": len(b), "digest": _digest(b)}
                for b in (first, second)
            ],
        }
    ).encode()
    status, headers, body = _request(
        f"{base}/v2/{name}/manifests/v1", "PUT", auth, manifest, {"Content-Type": registry.DOCKER_MANIFEST}
    )
    assert status == 201, body
    assert headers["Docker-Content-Digest"] == _digest(manifest)

    uri = f"{account_id}.dkr.ecr.us-east-1.amazonaws.com/{name}"
    got = registry.pull_layers(f"{uri}:v1", tmp_path / "by-tag", reg)
    assert got == json.loads(config)
    tool = tmp_path / "by-tag/usr/local/bin/tool"
    assert tool.read_bytes() == b"#!/bin/sh\necho two\n"  # the later layer wins
    assert tool.stat().st_mode & 0o100
    assert not (tmp_path / "by-tag/etc/old.conf").exists()  # whited out by the second layer

    assert registry.pull_layers(f"{uri}@{_digest(manifest)}", tmp_path / "by-digest", reg) == got
    wrong = "sha256:" + "0" * 64
    with pytest.raises(registry.RegistryError, match="404"):
        registry.pull_layers(f"{uri}@{wrong}", tmp_path / "missing", reg)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/kfaws-trainer", ("kfaws-trainer", "latest")),
        ("123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/trainer:0.1.0", ("team/trainer", "0.1.0")),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/t@sha256:" + "a" * 64, ("t", "sha256:" + "a" * 64)),
        ("127.0.0.1:5000/t:v1", ("t", "v1")),
        ("t:v1", ("t", "v1")),
    ],
)
def test_split_image_uri(uri, expected):
    assert registry.split_image_uri(uri) == expected


@pytest.mark.parametrize(
    "uri",
    [
        "example.com/t:v1",  # not ECR's host, not loopback
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/Upper",
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/t@sha256:short",
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/t:-tag",
    ],
)
def test_split_image_uri_refuses(uri):
    with pytest.raises(ValueError):
        registry.split_image_uri(uri)
