"""ECR DescribeImages, ListImages and BatchGetImage answer the images in the registry.

AWS: the images of a repository are the images pushed to its registry
endpoint. DescribeImages answers, per image, ``imageDigest``, all its
``imageTags``, ``imageSizeInBytes``, ``imagePushedAt``,
``imageManifestMediaType`` and ``artifactMediaType``; given ``imageIds``
(``imageTag`` and/or ``imageDigest``) it answers those images, and one that
does not exist is ``ImageNotFoundException``. ListImages answers an
``imageIds`` entry per tag (an untagged image once, without a tag), filtered
by ``filter.tagStatus`` (``TAGGED`` / ``UNTAGGED`` / ``ANY``). Both answer
at most ``maxResults`` (1-1000, default 100) items and a ``nextToken`` for
the rest. BatchGetImage answers each requested image's ``imageManifest`` and
``imageManifestMediaType`` and, in ``failures``, each id it cannot answer
(``ImageNotFound``, ``MissingDigestAndTag``, ``InvalidImageTag``,
``InvalidImageDigest``, ``ImageTagDoesNotMatchDigest``). A repository that
does not exist in the account and region is ``RepositoryNotFoundException``.
https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_DescribeImages.html
https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_ImageDetail.html
https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_ListImages.html
https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_BatchGetImage.html
https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_ImageFailure.html

moto 5.2.5 knows only the images given to its own PutImage; images pushed to
the emulator's registry (``registry.py``, handed out by the
``ecr_authorization_token`` patch) are invisible to it, so DescribeImages,
ListImages and BatchGetImage answer nothing for them.

With this patch, while the registry runs, it is the only source of a
repository's images (moto's PutImage images are not shown). The repository
must still exist in moto, in the caller's account and region (and
``registryId``, as moto checks it); its images are those of the registry
repository of the same name, read with the Docker Registry HTTP API V2:
``GET /v2/<name>/tags/list``, then ``HEAD`` / ``GET
/v2/<name>/manifests/<tag or digest>`` with ``Accept`` of the Docker v2
schema 2 and OCI manifest (and list / index) types, the digest being the
``Docker-Content-Digest`` header (checked against the body's sha256).

- ``imageSizeInBytes`` is the sum of the ``size`` of the manifest's
  ``layers`` (the compressed layers, as ECR counts); absent for a manifest
  list / index. ``artifactMediaType`` is the manifest's ``config.mediaType``.
- ``imagePushedAt``: the registry does not expose push times, so it is the
  first time this emulator saw that digest in that repository (through one
  of these three calls), kept for the emulator's life. It is never earlier
  than the real push, and stays the same on later calls.
- Untagged images: the registry lists tags only. An image whose tag moved to
  another image is still listed, untagged, when this emulator saw it before
  and the registry still has its manifest; an image pushed by digest only is
  found when asked for by digest.
- The registry is shared by every account and region: two accounts'
  repositories with the same name see the same images, and images outlive
  DeleteRepository. ``acceptedMediaTypes`` is ignored: the manifest is
  answered as stored (ECR's schema conversions are not done). The
  ``imageStatus`` filter and fields, scan status and pull times are not
  answered.
- A registry that cannot be reached or answers an error is
  ``ServerException``.

Without ``docker-registry`` installed (no registry), moto's answers are kept.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone

from moto.core.exceptions import ServiceException
from moto.core.responses import ActionResult
from moto.ecr.exceptions import ImageNotFoundException, InvalidParameterException
from moto.ecr.responses import ECRResponse

from .. import registry
from ._common import wrap

DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
ACCEPT = ", ".join((registry.DOCKER_MANIFEST, registry.OCI_MANIFEST, DOCKER_LIST, OCI_INDEX))
"""What the registry is asked for: image manifests and lists / indexes, as stored."""
DEFAULT_MAX_RESULTS = 100
MAX_RESULTS = 1000
HTTP_TIMEOUT_S = 30.0

# ImageTag and ImageDigest as the ECR API model constrains them (1-300
# characters), narrowed to what the registry can hold: the Distribution tag
# grammar, and sha256 digests (the only kind ECR computes).
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")


@dataclass(frozen=True)
class Manifest:
    """One manifest of the registry, by digest (content-addressed, so never stale)."""

    digest: str
    media_type: str
    body: str
    size_bytes: int | None
    """Sum of the layers' sizes; None for a list / index."""
    artifact_media_type: str | None


_lock = threading.Lock()
_manifests: dict[str, Manifest] = {}
_first_seen: dict[tuple[str, str], datetime] = {}
"""(registry repository name, digest) -> when this emulator first saw it (``imagePushedAt``)."""


def _server_error(message: str) -> ServiceException:
    return ServiceException("ServerException", f"the emulator's registry: {message}")


def _call(reg: registry.Registry, method: str, path: str) -> tuple[int, dict, bytes]:
    """Status, headers and body of one registry request; ServerException if it cannot be made."""
    request = urllib.request.Request(f"{reg.url}{path}", method=method)
    request.add_header("Authorization", reg.authorization())
    request.add_header("Accept", ACCEPT)
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()
    except OSError as err:
        raise _server_error(f"{method} {path}: {err}") from None


def _path(name: str, *rest: str) -> str:
    return "/v2/" + urllib.parse.quote(name, safe="/") + "/" + "/".join(urllib.parse.quote(r, safe=":") for r in rest)


def _tags(reg: registry.Registry, name: str) -> list[str]:
    """The repository's tags; none when the registry has no such repository."""
    status, _, body = _call(reg, "GET", _path(name, "tags", "list"))
    if status == 404:
        return []
    if status != 200:
        raise _server_error(f"GET tags of {name}: HTTP {status}: {body[:300].decode(errors='replace')}")
    return sorted(json.loads(body).get("tags") or [])


def _parse(digest: str, body: bytes, content_type: str) -> Manifest:
    document = json.loads(body)
    media_type = document.get("mediaType") or content_type.split(";")[0].strip()
    size = None
    if media_type not in (DOCKER_LIST, OCI_INDEX):
        size = sum(int(layer.get("size", 0)) for layer in document.get("layers") or [])
    artifact = (document.get("config") or {}).get("mediaType")
    return Manifest(digest, media_type, body.decode(), size, artifact)


def _resolve(reg: registry.Registry, name: str, reference: str) -> Manifest | None:
    """The manifest a tag or digest names, None if the registry has none."""
    status, headers, body = _call(reg, "HEAD", _path(name, "manifests", reference))
    if status == 404:
        return None
    digest = headers.get("Docker-Content-Digest", "")
    if status != 200 or not _DIGEST.match(digest):
        raise _server_error(f"HEAD manifest {name}:{reference}: HTTP {status}, digest {digest!r}")
    with _lock:
        known = _manifests.get(digest)
    if known is None:
        status, headers, body = _call(reg, "GET", _path(name, "manifests", digest))
        if status == 404:  # deleted between the two requests
            return None
        if status != 200:
            raise _server_error(f"GET manifest {name}@{digest}: HTTP {status}: {body[:300].decode(errors='replace')}")
        actual = "sha256:" + hashlib.sha256(body).hexdigest()
        if actual != digest:
            raise _server_error(f"manifest {name}@{digest} has digest {actual}")
        known = _parse(digest, body, headers.get("Content-Type", ""))
        with _lock:
            _manifests[digest] = known
    with _lock:
        _first_seen.setdefault((name, digest), datetime.now(timezone.utc))
    return known


@dataclass
class _Image:
    manifest: Manifest
    tags: list[str]


class _Inventory:
    """A repository's images as the registry holds them now (one API call's view)."""

    def __init__(self, reg: registry.Registry, name: str) -> None:
        self.reg, self.name = reg, name
        self.by_digest: dict[str, _Image] = {}
        self.by_tag: dict[str, str] = {}
        for tag in _tags(reg, name):
            manifest = _resolve(reg, name, tag)
            if manifest is not None:
                self.by_tag[tag] = manifest.digest
                self.by_digest.setdefault(manifest.digest, _Image(manifest, [])).tags.append(tag)
        with _lock:
            seen = [d for (n, d) in _first_seen if n == name and d not in self.by_digest]
        for digest in seen:  # untagged now: listed while the registry still has it
            self.digest(digest)

    def digest(self, digest: str) -> _Image | None:
        image = self.by_digest.get(digest)
        if image is None and _DIGEST.match(digest):
            manifest = _resolve(self.reg, self.name, digest)
            if manifest is not None:
                image = self.by_digest[digest] = _Image(manifest, [])
        return image

    def find(self, image_id: dict) -> tuple[_Image | None, str | None]:
        """The image an ``ImageIdentifier`` names, or None and the ``ImageFailure`` code."""
        tag, digest = image_id.get("imageTag"), image_id.get("imageDigest")
        if not tag and not digest:
            return None, "MissingDigestAndTag"
        if tag and not _TAG.match(tag):
            return None, "InvalidImageTag"
        if digest and not _DIGEST.match(digest):
            return None, "InvalidImageDigest"
        image = self.by_digest.get(self.by_tag[tag]) if tag in self.by_tag else None
        if tag and image is None:
            return None, "ImageNotFound"
        if digest:
            if image is not None and image.manifest.digest != digest:
                return None, "ImageTagDoesNotMatchDigest"
            image = self.digest(digest)
            if image is None:
                return None, "ImageNotFound"
        return image, None

    def pushed_at(self, image: _Image) -> datetime:
        with _lock:
            return _first_seen[(self.name, image.manifest.digest)]

    def ordered(self, tag_status: str) -> list[_Image]:
        """The images, oldest first, filtered by ``tagStatus``."""
        images = sorted(self.by_digest.values(), key=lambda i: (self.pushed_at(i), i.manifest.digest))
        if tag_status == "TAGGED":
            return [i for i in images if i.tags]
        if tag_status == "UNTAGGED":
            return [i for i in images if not i.tags]
        return images


def _repository(response: ECRResponse):
    """The moto repository the request names (RepositoryNotFoundException, as moto, if none)."""
    return response.ecr_backend._get_repository(
        response._get_param("repositoryName"), response._get_param("registryId")
    )


def _not_found(repository, image_id: dict) -> ImageNotFoundException:
    rep = f"{{imageDigest:'{image_id.get('imageDigest') or 'null'}', imageTag:'{image_id.get('imageTag') or 'null'}'}}"
    return ImageNotFoundException(image_id=rep, repository_name=repository.name, registry_id=repository.registry_id)


def _page(response: ECRResponse, items: list) -> tuple[list, str | None]:
    """``maxResults`` items from ``nextToken`` on, and the token of the rest (None at the end)."""
    max_results = response._get_param("maxResults") or DEFAULT_MAX_RESULTS
    if not 1 <= int(max_results) <= MAX_RESULTS:
        raise InvalidParameterException(f"maxResults must be between 1 and {MAX_RESULTS}, not {max_results}")
    token = response._get_param("nextToken")
    start = 0
    if token:
        try:
            start = int(base64.urlsafe_b64decode(token.encode()).decode().removeprefix("offset:"))
        except ValueError:
            raise InvalidParameterException(f"nextToken {token!r} is not one this emulator handed out") from None
    end = start + int(max_results)
    rest = base64.urlsafe_b64encode(f"offset:{end}".encode()).decode() if end < len(items) else None
    return items[start:end], rest


def _tag_status(response: ECRResponse) -> str:
    return (response._get_param("filter") or {}).get("tagStatus") or "ANY"


def describe_images(response: ECRResponse, reg: registry.Registry) -> ActionResult:
    repository = _repository(response)
    inventory = _Inventory(reg, repository.name)
    image_ids = response._get_param("imageIds")
    if image_ids:
        images, next_token = [], None
        for image_id in image_ids:
            image, failure = inventory.find(image_id)
            if failure in ("MissingDigestAndTag", "InvalidImageTag", "InvalidImageDigest"):
                raise InvalidParameterException(f"imageId {image_id}: {failure}")
            if image is None:
                raise _not_found(repository, image_id)
            if image not in images:
                images.append(image)
    else:
        images, next_token = _page(response, inventory.ordered(_tag_status(response)))
    details = []
    for image in images:
        detail = {
            "registryId": repository.registry_id,
            "repositoryName": repository.name,
            "imageDigest": image.manifest.digest,
            "imagePushedAt": inventory.pushed_at(image),
            "imageManifestMediaType": image.manifest.media_type,
        }
        if image.tags:  # ECR leaves imageTags out for an untagged image
            detail["imageTags"] = list(image.tags)
        if image.manifest.size_bytes is not None:
            detail["imageSizeInBytes"] = image.manifest.size_bytes
        if image.manifest.artifact_media_type:
            detail["artifactMediaType"] = image.manifest.artifact_media_type
        details.append(detail)
    result = {"imageDetails": details}
    if next_token:
        result["nextToken"] = next_token
    return ActionResult(result)


def list_images(response: ECRResponse, reg: registry.Registry) -> ActionResult:
    repository = _repository(response)
    inventory = _Inventory(reg, repository.name)
    ids = []
    for image in inventory.ordered(_tag_status(response)):
        digest = image.manifest.digest
        ids.extend({"imageDigest": digest, "imageTag": t} for t in image.tags)
        if not image.tags:
            ids.append({"imageDigest": digest})
    page, next_token = _page(response, ids)
    result = {"imageIds": page}
    if next_token:
        result["nextToken"] = next_token
    return ActionResult(result)


_REASONS = {
    "ImageNotFound": "Requested image not found",
    "MissingDigestAndTag": "Invalid request parameters: image tag and digest cannot both be null",
    "InvalidImageTag": "Invalid request parameters: the image tag is not a valid tag",
    "InvalidImageDigest": "Invalid request parameters: the image digest is not a valid sha256 digest",
    "ImageTagDoesNotMatchDigest": "Invalid request parameters: the image tag does not match the digest",
}


def batch_get_image(response: ECRResponse, reg: registry.Registry) -> ActionResult:
    repository = _repository(response)
    image_ids = response._get_param("imageIds")
    if not image_ids:
        raise InvalidParameterException("imageIds must hold at least one image identifier")
    inventory = _Inventory(reg, repository.name)
    images, failures = [], []
    for image_id in image_ids:
        image, failure = inventory.find(image_id)
        requested = {k: v for k, v in image_id.items() if k in ("imageTag", "imageDigest") and v}
        if image is None:
            failures.append({"imageId": requested, "failureCode": failure, "failureReason": _REASONS[failure]})
            continue
        images.append(
            {
                "registryId": repository.registry_id,
                "repositoryName": repository.name,
                "imageId": {**requested, "imageDigest": image.manifest.digest},
                "imageManifest": image.manifest.body,
                "imageManifestMediaType": image.manifest.media_type,
            }
        )
    return ActionResult({"images": images, "failures": failures})


def apply() -> None:
    for name, answer in (
        ("describe_images", describe_images),
        ("list_images", list_images),
        ("batch_get_image", batch_get_image),
    ):

        def make(original, answer=answer):
            def from_registry(self):
                reg = registry.current()
                if reg is None:
                    return original(self)
                return answer(self, reg)

            return from_registry

        wrap(ECRResponse, name, make)
