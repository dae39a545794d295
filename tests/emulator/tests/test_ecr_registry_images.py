"""ECR DescribeImages, ListImages and BatchGetImage answer what was pushed to the registry.

Patch ``ecr_registry_images``: images are pushed over the Docker Registry
HTTP API V2 with the credentials GetAuthorizationToken answers (as
``kfaws image push`` does), then read back with boto3's ECR client.
"""

from __future__ import annotations

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

pytestmark = pytest.mark.skipif(
    shutil.which("docker-registry") is None or shutil.which("htpasswd") is None,
    reason="Debian packages docker-registry and apache2-utils (make deps) are not installed",
)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Pusher:
    """Pushes blobs and manifests to the registry at the token's ``proxyEndpoint``."""

    def __init__(self, aws) -> None:
        data = aws("ecr").get_authorization_token()["authorizationData"][0]
        self.base = data["proxyEndpoint"]
        self.auth = "Basic " + data["authorizationToken"]

    def request(self, url: str, method: str, data: bytes, headers: dict | None = None):
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", self.auth)
        for k, v in (headers or {}).items():
            request.add_header(k, v)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as err:
            return err.code, err.headers, err.read()

    def blob(self, name: str, blob: bytes) -> dict:
        status, headers, body = self.request(f"{self.base}/v2/{name}/blobs/uploads/", "POST", b"")
        assert status == 202, body
        location = headers["Location"]
        location = location if location.startswith("http") else self.base + location
        separator = "&" if "?" in location else "?"
        status, _, body = self.request(
            f"{location}{separator}digest={_digest(blob)}", "PUT", blob, {"Content-Type": "application/octet-stream"}
        )
        assert status == 201, body
        return {"size": len(blob), "digest": _digest(blob)}

    def image(self, name: str, tag: str, files: dict[str, bytes]) -> tuple[bytes, int]:
        """Pushes a one- or two-layer image under ``tag``; its manifest bytes and its layers' total size."""
        layers = []
        for path, content in files.items():
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                info = tarfile.TarInfo(path)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
            layers.append(gzip.compress(buffer.getvalue(), mtime=0))
        config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": [f"TAG={tag}"]}}).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": registry.DOCKER_MANIFEST,
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **self.blob(name, config)},
                "layers": [
                    {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", **self.blob(name, layer)}
                    for layer in layers
                ],
            }
        ).encode()
        self.tag(name, tag, manifest)
        return manifest, sum(len(layer) for layer in layers)

    def tag(self, name: str, tag: str, manifest: bytes) -> None:
        status, headers, body = self.request(
            f"{self.base}/v2/{name}/manifests/{tag}", "PUT", manifest, {"Content-Type": registry.DOCKER_MANIFEST}
        )
        assert status == 201, body
        assert headers["Docker-Content-Digest"] == _digest(manifest)


@pytest.fixture
def pushed(aws, account_id):
    """A repository with tags ``v1`` and ``v2`` (two images) pushed to the registry."""
    ecr = aws("ecr")
    name = f"test-{account_id}/images"
    ecr.create_repository(repositoryName=name)
    pusher = Pusher(aws)
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    v1, v1_size = pusher.image(name, "v1", {"bin/one": b"one\n"})
    v2, v2_size = pusher.image(name, "v2", {"bin/two": b"two\n", "etc/two.conf": b"2"})
    return {
        "ecr": ecr,
        "name": name,
        "pusher": pusher,
        "before": before,
        "v1": (_digest(v1), v1, v1_size),
        "v2": (_digest(v2), v2, v2_size),
    }


def test_describe_images_answers_every_pushed_image(pushed, account_id):
    ecr, name = pushed["ecr"], pushed["name"]
    details = ecr.describe_images(repositoryName=name)["imageDetails"]
    by_digest = {d["imageDigest"]: d for d in details}
    assert set(by_digest) == {pushed["v1"][0], pushed["v2"][0]}
    for tag in ("v1", "v2"):
        digest, _, size = pushed[tag]
        detail = by_digest[digest]
        assert detail["imageTags"] == [tag]
        assert detail["imageSizeInBytes"] == size
        assert detail["registryId"] == account_id
        assert detail["repositoryName"] == name
        assert detail["imageManifestMediaType"] == registry.DOCKER_MANIFEST
        assert detail["artifactMediaType"] == "application/vnd.docker.container.image.v1+json"
        assert pushed["before"] <= detail["imagePushedAt"] <= dt.datetime.now(dt.timezone.utc)
    # The push time is recorded once: a later call answers the same.
    again = {d["imageDigest"]: d["imagePushedAt"] for d in ecr.describe_images(repositoryName=name)["imageDetails"]}
    assert again == {d: by_digest[d]["imagePushedAt"] for d in by_digest}


def test_describe_images_by_tag_and_by_digest(pushed):
    ecr, name = pushed["ecr"], pushed["name"]
    digest, _, size = pushed["v2"]
    [by_tag] = ecr.describe_images(repositoryName=name, imageIds=[{"imageTag": "v2"}])["imageDetails"]
    assert (by_tag["imageDigest"], by_tag["imageTags"], by_tag["imageSizeInBytes"]) == (digest, ["v2"], size)
    [by_digest] = ecr.describe_images(repositoryName=name, imageIds=[{"imageDigest": digest}])["imageDetails"]
    assert by_digest == by_tag
    both = ecr.describe_images(repositoryName=name, imageIds=[{"imageTag": "v1"}, {"imageTag": "v2"}])
    assert [d["imageDigest"] for d in both["imageDetails"]] == [pushed["v1"][0], digest]


def test_describe_images_of_a_missing_tag_or_digest_is_image_not_found(pushed):
    ecr, name = pushed["ecr"], pushed["name"]
    missing = (
        {"imageTag": "v3"},
        {"imageDigest": "sha256:" + "0" * 64},
        {"imageTag": "v1", "imageDigest": pushed["v2"][0]},  # both exist, as different images
    )
    for image_id in missing:
        with pytest.raises(ecr.exceptions.ImageNotFoundException):
            ecr.describe_images(repositoryName=name, imageIds=[{"imageTag": "v2"}, image_id])


def test_list_images_answers_each_tag(pushed):
    ecr, name = pushed["ecr"], pushed["name"]
    ids = ecr.list_images(repositoryName=name)["imageIds"]
    assert sorted((i["imageTag"], i["imageDigest"]) for i in ids) == [("v1", pushed["v1"][0]), ("v2", pushed["v2"][0])]
    # Pagination: one at a time, with nextToken.
    first = ecr.list_images(repositoryName=name, maxResults=1)
    second = ecr.list_images(repositoryName=name, maxResults=1, nextToken=first["nextToken"])
    assert "nextToken" not in second
    assert sorted(i["imageTag"] for i in first["imageIds"] + second["imageIds"]) == ["v1", "v2"]


def test_batch_get_image_answers_manifests_and_failures(pushed):
    ecr, name = pushed["ecr"], pushed["name"]
    v1_digest, v1_manifest, _ = pushed["v1"]
    v2_digest, v2_manifest, _ = pushed["v2"]
    answer = ecr.batch_get_image(
        repositoryName=name,
        imageIds=[{"imageTag": "v1"}, {"imageDigest": v2_digest}, {"imageTag": "missing"}],
    )
    got = {i["imageId"]["imageDigest"]: i for i in answer["images"]}
    assert set(got) == {v1_digest, v2_digest}
    assert got[v1_digest]["imageId"] == {"imageTag": "v1", "imageDigest": v1_digest}
    assert got[v1_digest]["imageManifest"].encode() == v1_manifest
    assert got[v2_digest]["imageManifest"].encode() == v2_manifest
    assert {i["imageManifestMediaType"] for i in answer["images"]} == {registry.DOCKER_MANIFEST}
    [failure] = answer["failures"]
    assert failure["imageId"] == {"imageTag": "missing"}
    assert failure["failureCode"] == "ImageNotFound"


def test_a_moved_tag_leaves_the_old_image_untagged(pushed):
    ecr, name, pusher = pushed["ecr"], pushed["name"], pushed["pusher"]
    ecr.describe_images(repositoryName=name)  # the emulator has seen v1's image
    pusher.tag(name, "v1", pushed["v2"][1])  # v1 now names v2's image
    details = {d["imageDigest"]: d for d in ecr.describe_images(repositoryName=name)["imageDetails"]}
    assert "imageTags" not in details[pushed["v1"][0]]
    assert sorted(details[pushed["v2"][0]]["imageTags"]) == ["v1", "v2"]
    untagged = ecr.list_images(repositoryName=name, filter={"tagStatus": "UNTAGGED"})["imageIds"]
    assert untagged == [{"imageDigest": pushed["v1"][0]}]


def test_a_repository_that_does_not_exist_in_the_account_is_repository_not_found(pushed):
    ecr = pushed["ecr"]
    with pytest.raises(ecr.exceptions.RepositoryNotFoundException):
        ecr.describe_images(repositoryName=pushed["name"] + "-absent")
    with pytest.raises(ecr.exceptions.RepositoryNotFoundException):
        ecr.list_images(repositoryName=pushed["name"], registryId="000000000000")
