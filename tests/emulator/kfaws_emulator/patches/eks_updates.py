"""EKS cluster updates: UpdateClusterVersion, UpdateClusterConfig and DescribeUpdate.

AWS: UpdateClusterVersion (``POST /clusters/{name}/updates``) upgrades an
ACTIVE cluster by exactly one Kubernetes minor version; UpdateClusterConfig
changes only the fields it is given (endpoint access keeps the subnets, the
VPC and the cluster security group); both answer an ``Update`` that is
``InProgress`` while the cluster is ``UPDATING`` and then ``Successful``,
and DescribeUpdate (``GET /clusters/{name}/updates/{updateId}``, with
``nodegroupName`` for node group updates) reports it.
https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateClusterVersion.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateClusterConfig.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeUpdate.html
https://docs.aws.amazon.com/eks/latest/userguide/update-cluster.html

moto 5.2.5 has no UpdateClusterVersion nor DescribeUpdate (no route: 404);
its UpdateClusterConfig replaces the whole ``resourcesVpcConfig`` with the
request's (the subnets, ``vpcId`` and ``clusterSecurityGroupId`` are lost)
and answers the cluster instead of an update; the update UpdateNodegroupConfig
answers cannot be described. Duration: ``eks.cluster.update`` (lifecycle.py).
"""

from __future__ import annotations

from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.eks import urls
from moto.eks.exceptions import InvalidParameterException, ResourceInUseException, ResourceNotFoundException
from moto.eks.models import EKSBackend
from moto.eks.responses import EKSResponse
from moto.moto_api._internal import mock_random as random

from ..lifecycle import LIFECYCLE
from ._common import wrap

_ENDPOINT_FIELDS = ("endpointPublicAccess", "endpointPrivateAccess", "publicAccessCidrs")


def _not_found(name: str, update_id: str | None = None) -> ResourceNotFoundException:
    what = f"No update found for ID: {update_id}." if update_id else f"No cluster found for name: {name}."
    return ResourceNotFoundException(
        clusterName=name, nodegroupName=None, fargateProfileName=None, addonName=None, message=what
    )


def _updates(backend: EKSBackend) -> dict:
    if not hasattr(backend, "kfaws_updates"):
        backend.kfaws_updates = {}
    return backend.kfaws_updates


def _active(backend: EKSBackend, name: str):
    """The cluster ``name``, which must exist and be ACTIVE (one update at a time)."""
    cluster = backend.clusters.get(name)
    if cluster is None:
        raise _not_found(name)
    if cluster.status != "ACTIVE":
        raise ResourceInUseException(
            clusterName=name,
            nodegroupName=None,
            addonName=None,
            message=f"Cluster {name} is currently {cluster.status}; an update can start only when it is ACTIVE",
        )
    return cluster


def _cluster_update(backend: EKSBackend, name: str, kind: str, params: list, change) -> dict:
    """Records an InProgress update of cluster ``name``; ``change`` runs when it succeeds."""
    cluster = _active(backend, name)
    update = {
        "id": str(random.uuid4()),
        "status": "InProgress",
        "type": kind,
        "params": params,
        "createdAt": utcnow(),
        "errors": [],
    }
    _updates(backend)[(name, None, update["id"])] = update
    cluster.status = "UPDATING"

    def finish() -> None:
        change(cluster)
        update["status"] = "Successful"
        if cluster.status == "UPDATING":
            cluster.status = "ACTIVE"

    LIFECYCLE.schedule(LIFECYCLE.duration("eks.cluster.update", backend.account_id), finish)
    return update


def apply() -> None:
    urls.url_paths["{0}/clusters/(?P<name>[^/]+)/updates$"] = urls.response.dispatch
    urls.url_paths["{0}/clusters/(?P<name>[^/]+)/updates/(?P<updateId>[^/]+)$"] = urls.response.dispatch

    def update_cluster_version(self, name: str, version: str) -> dict:
        cluster = _active(self, name)
        current = int(cluster.version.split(".")[1])
        wanted = version.split(".")
        if len(wanted) != 2 or wanted[0] != "1" or not wanted[1].isdigit() or int(wanted[1]) != current + 1:
            raise InvalidParameterException(
                clusterName=name,
                nodegroupName=None,
                fargateProfileName=None,
                addonName=None,
                message=f"Unsupported Kubernetes minor version update from {cluster.version} to {version}",
            )

        def change(c) -> None:
            c.version = version

        return _cluster_update(self, name, "VersionUpdate", [{"type": "Version", "value": version}], change)

    def make_update_cluster_config(original):
        def update_cluster_config(self, name, resources_vpc_config=None, logging=None, **kwargs):
            if not resources_vpc_config:
                original(self, name, resources_vpc_config, logging, **kwargs)
                return None
            access = {k: v for k, v in resources_vpc_config.items() if k in _ENDPOINT_FIELDS}
            params = [
                {"type": k[0].upper() + k[1:], "value": str(v).lower() if isinstance(v, bool) else str(v)}
                for k, v in access.items()
            ]

            def change(c) -> None:
                c.resources_vpc_config.update(access)

            return _cluster_update(self, name, "EndpointAccessUpdate", params, change)

        return update_cluster_config

    def make_update_nodegroup_config(original):
        def update_nodegroup_config(self, cluster_name, nodegroup_name, *args, **kwargs):
            update = original(self, cluster_name, nodegroup_name, *args, **kwargs)
            _updates(self)[(cluster_name, nodegroup_name, update["id"])] = update
            return update

        return update_nodegroup_config

    def describe_update(self, name: str, update_id: str, nodegroup_name: str | None) -> dict:
        if name not in self.clusters:
            raise _not_found(name)
        update = _updates(self).get((name, nodegroup_name or None, update_id))
        if update is None:
            raise _not_found(name, update_id)
        return update

    EKSBackend.update_cluster_version = update_cluster_version
    EKSBackend.describe_update = describe_update
    wrap(EKSBackend, "update_cluster_config", make_update_cluster_config)
    wrap(EKSBackend, "update_nodegroup_config", make_update_nodegroup_config)

    def response_update_cluster_version(self) -> ActionResult:
        update = self.eks_backend.update_cluster_version(self._get_param("name"), self._get_param("version"))
        return ActionResult({"update": update})

    def response_update_cluster_config(self) -> ActionResult:
        update = self.eks_backend.update_cluster_config(
            name=self._get_param("name"),
            resources_vpc_config=self._get_param("resourcesVpcConfig"),
            logging=self._get_param("logging"),
        )
        return ActionResult({"update": update} if update else {})

    def response_describe_update(self) -> ActionResult:
        update = self.eks_backend.describe_update(
            self._get_param("name"), self._get_param("updateId"), self._get_param("nodegroupName")
        )
        return ActionResult({"update": update})

    EKSResponse.update_cluster_version = response_update_cluster_version
    EKSResponse.update_cluster_config = response_update_cluster_config
    EKSResponse.describe_update = response_describe_update
