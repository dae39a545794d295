"""An EKS cluster's endpoint is a reachable API server, and its creator is recorded.

AWS Cluster: ``endpoint`` is the HTTPS endpoint of the cluster's Kubernetes
API server and ``certificateAuthority.data`` the base64-encoded PEM of the
CA that signed its serving certificate.
https://docs.aws.amazon.com/eks/latest/APIReference/API_Cluster.html
The IAM principal that creates a cluster gets cluster-admin access to it
(``accessConfig.bootstrapClusterCreatorAdminPermissions``, true by default).
https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateAccessConfigRequest.html
https://docs.aws.amazon.com/eks/latest/userguide/access-entries.html

moto 5.2.5 answers a made-up ``https://<random>.gr7.<region>.eks.amazonaws.com``
and 1,400 random characters as the CA: nothing can connect to that cluster.
kfaws' tests and demo run a real kube-apiserver (``tests/apiserver``) and
register its endpoint and CA here over the control API
(``PUT /_kfaws/eks/cluster-endpoint``); from then on every cluster of that
account (existing, and created later) answers them in CreateCluster,
DescribeCluster and ListClusters' details, so kfaws reaches the emulated
cluster exactly as it reaches a real one.

moto does not record who created a cluster. This module records the caller
identity ARN (as STS GetCallerIdentity would answer it for the request's
access key) at CreateCluster; the harness' token webhook reads it
(``GET /_kfaws/eks/cluster-creator``) to grant the creator
``system:masters``, as EKS grants the creator cluster-admin access.
"""

from __future__ import annotations

import base64
import binascii
import threading
import urllib.parse

from moto.eks.models import EKSBackend, eks_backends
from moto.sts.models import sts_backends
from moto.utilities.utils import get_partition

from ..operations import ACCOUNT_ID
from ._common import argument, thread_state, wrap


class EndpointError(ValueError):
    """A rejected registration or lookup; the message names the field and the rule."""


_lock = threading.Lock()
# account id (None: every account) -> {"endpoint": ..., "certificate_authority_data": ...}
_registered: dict[str | None, dict[str, str]] = {}


def _validate(data) -> tuple[str | None, dict[str, str]]:
    if not isinstance(data, dict):
        raise EndpointError('the body must be a JSON object {"endpoint", "certificate_authority_data", "account_id"?}')
    unknown = set(data) - {"endpoint", "certificate_authority_data", "account_id"}
    if unknown:
        raise EndpointError(f"unknown field(s) {sorted(unknown)}; known: endpoint, certificate_authority_data, account_id")
    endpoint = data.get("endpoint")
    url = urllib.parse.urlsplit(endpoint) if isinstance(endpoint, str) else None
    if url is None or url.scheme != "https" or not url.hostname:
        raise EndpointError("field 'endpoint' must be an https:// URL of the API server (EKS endpoints are HTTPS)")
    ca = data.get("certificate_authority_data")
    try:
        pem = base64.b64decode(ca, validate=True) if isinstance(ca, str) else b""
    except binascii.Error:
        pem = b""
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise EndpointError(
            "field 'certificate_authority_data' must be the base64 of a PEM CA certificate "
            "(as EKS certificateAuthority.data)"
        )
    account = data.get("account_id")
    if account is not None and not (isinstance(account, str) and ACCOUNT_ID.match(account)):
        raise EndpointError("field 'account_id' must be a 12-digit AWS account id (omit it for every account)")
    return account, {"endpoint": endpoint, "certificate_authority_data": ca}


def _for_account(account_id: str) -> dict[str, str] | None:
    with _lock:
        return _registered.get(account_id) or _registered.get(None)


def _point(cluster, target: dict[str, str]) -> None:
    cluster.endpoint = target["endpoint"]
    cluster.certificate_authority = {"data": target["certificate_authority_data"]}


def register(data) -> dict:
    """Registers an API server for one account (or all); points existing clusters at it.

    Returns the registration, with ``clusters``: how many existing clusters now answer it.
    Raises EndpointError naming the field and the rule.
    """
    account, target = _validate(data)
    with _lock:
        _registered[account] = target
    pointed = 0
    for account_id, regions in list(eks_backends.items()):
        if account is not None and account_id != account:
            continue
        if account is None and account_id in _registered:
            continue  # an account-specific registration wins
        for backend in list(regions.values()):
            for cluster in backend.clusters.values():
                _point(cluster, target)
                pointed += 1
    return {"account_id": account, **target, "clusters": pointed}


def registrations() -> list[dict]:
    with _lock:
        return [{"account_id": a, **t} for a, t in _registered.items()]


def reset() -> None:
    with _lock:
        _registered.clear()


def creator(account_id: str | None, region: str | None, name: str | None) -> dict:
    """``{"arn": ...}`` of the principal that created cluster ``name``; EndpointError if unknown."""
    if not (account_id and ACCOUNT_ID.match(account_id)):
        raise EndpointError("query parameter 'account_id' must be a 12-digit AWS account id")
    if not region or not name:
        raise EndpointError("query parameters 'region' and 'name' are required")
    backend = eks_backends[account_id][region] if region in eks_backends[account_id] else None
    cluster = backend.clusters.get(name) if backend is not None else None
    if cluster is None:
        raise LookupError(f"no EKS cluster {name!r} in account {account_id} region {region}")
    return {"arn": getattr(cluster, "kfaws_creator_arn", None)}


def apply() -> None:
    def make_create_cluster(original):
        def create_cluster(self, *args, **kwargs):
            name = argument(original, "name", (self, *args), kwargs)
            existed = name in self.clusters
            cluster = original(self, *args, **kwargs)
            if existed:
                return cluster
            target = _for_account(self.account_id)
            if target is not None:
                _point(cluster, target)
            access_key = getattr(thread_state(), "access_key", None)
            if access_key:
                sts = sts_backends[self.account_id][get_partition(self.region_name)]
                cluster.kfaws_creator_arn = sts.get_caller_identity(access_key, self.region_name)[1]
            return cluster

        return create_cluster

    wrap(EKSBackend, "create_cluster", make_create_cluster)
