"""EKS cluster and node group updates: UpdateClusterVersion, UpdateClusterConfig,
UpdateNodegroupVersion and DescribeUpdate.

AWS: UpdateClusterVersion (``POST /clusters/{name}/updates``) upgrades an
ACTIVE cluster by exactly one Kubernetes minor version; UpdateClusterConfig
changes only the fields it is given (endpoint access keeps the subnets, the
VPC and the cluster security group); both answer an ``Update`` that is
``InProgress`` while the cluster is ``UPDATING`` and then ``Successful``,
and DescribeUpdate (``GET /clusters/{name}/updates/{updateId}``, with
``nodegroupName`` for node group updates) reports it.

Node group versions: a node group is created on the cluster's Kubernetes
version unless ``version`` names another, never a newer one
(CreateNodegroup: "By default, the Kubernetes version of the cluster is
used"); UpdateNodegroupVersion (``POST
/clusters/{name}/node-groups/{nodegroupName}/update-version``) moves an
ACTIVE node group to ``version`` (default: the cluster's), neither above
the cluster's nor below its own, the node group ``UPDATING`` meanwhile; and
UpdateClusterVersion is refused while a node group runs another version
than the control plane ("Nodegroups X must be updated to match cluster
version 1.18 before updating cluster version", EKS User Guide, "Update
existing cluster to new Kubernetes version": the nodes must run the control
plane's minor version before its next upgrade).
https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateNodegroup.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateNodegroupVersion.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateClusterVersion.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateClusterConfig.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeUpdate.html
https://docs.aws.amazon.com/eks/latest/userguide/update-cluster.html

moto 5.2.5 has no UpdateClusterVersion nor DescribeUpdate (no route: 404);
its UpdateClusterConfig replaces the whole ``resourcesVpcConfig`` with the
request's (the subnets, ``vpcId`` and ``clusterSecurityGroupId`` are lost)
and answers the cluster instead of an update; the update UpdateNodegroupConfig
answers cannot be described; node groups default to Kubernetes 1.19 whatever
the cluster runs, and UpdateNodegroupVersion has no route. Durations:
``eks.cluster.update``, ``eks.nodegroup.update`` (lifecycle.py).
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
from ._common import argument, wrap

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


def _minor(version) -> int | None:
    """The minor of a ``1.N`` Kubernetes version, else None."""
    parts = str(version).split(".")
    if len(parts) != 2 or parts[0] != "1" or not parts[1].isdigit():
        return None
    return int(parts[1])


def _invalid(name: str, message: str, nodegroup: str | None = None) -> InvalidParameterException:
    return InvalidParameterException(
        clusterName=name, nodegroupName=nodegroup, fargateProfileName=None, addonName=None, message=message
    )


def _record(backend: EKSBackend, name: str, nodegroup: str | None, kind: str, params: list) -> dict:
    """A new InProgress update, readable with DescribeUpdate."""
    update = {
        "id": str(random.uuid4()),
        "status": "InProgress",
        "type": kind,
        "params": params,
        "createdAt": utcnow(),
        "errors": [],
    }
    _updates(backend)[(name, nodegroup, update["id"])] = update
    return update


def _cluster_update(backend: EKSBackend, name: str, kind: str, params: list, change) -> dict:
    """Records an InProgress update of cluster ``name``; ``change`` runs when it succeeds."""
    cluster = _active(backend, name)
    update = _record(backend, name, None, kind, params)
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

    urls.url_paths["{0}/clusters/(?P<name>[^/]+)/node-groups/(?P<nodegroupName>[^/]+)/update-version$"] = (
        urls.response.dispatch
    )

    def update_cluster_version(self, name: str, version: str) -> dict:
        cluster = _active(self, name)
        current = _minor(cluster.version)
        if current is None or _minor(version) != current + 1:
            raise _invalid(name, f"Unsupported Kubernetes minor version update from {cluster.version} to {version}")
        behind = sorted(n for n, g in cluster.nodegroups.items() if g.version != cluster.version)
        if behind:
            raise _invalid(
                name,
                f"Nodegroups {', '.join(behind)} must be updated to match cluster version "
                f"{cluster.version} before updating cluster version",
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

    def make_create_nodegroup(original):
        def create_nodegroup(self, *args, **kwargs):
            name = argument(original, "cluster_name", (self, *args), kwargs)
            version = argument(original, "version", (self, *args), kwargs)
            cluster = self.clusters.get(name)
            if cluster is not None and version is not None:
                wanted, current = _minor(version), _minor(cluster.version)
                if wanted is None or current is None or wanted > current:
                    nodegroup = argument(original, "nodegroup_name", (self, *args), kwargs)
                    raise _invalid(
                        name,
                        f"Requested Nodegroup version {version} is invalid for cluster version {cluster.version}",
                        nodegroup,
                    )
            nodegroup = original(self, *args, **kwargs)
            if cluster is not None and version is None:
                nodegroup.version = cluster.version
            return nodegroup

        return create_nodegroup

    def update_nodegroup_version(self, name: str, nodegroup_name: str, version: str | None) -> dict:
        cluster = self.clusters.get(name)
        if cluster is None:
            raise _not_found(name)
        nodegroup = cluster.nodegroups.get(nodegroup_name)
        if nodegroup is None:
            raise ResourceNotFoundException(
                clusterName=name,
                nodegroupName=nodegroup_name,
                fargateProfileName=None,
                addonName=None,
                message=f"No node group found for name: {nodegroup_name}.",
            )
        if nodegroup.status != "ACTIVE":
            raise ResourceInUseException(
                clusterName=name,
                nodegroupName=nodegroup_name,
                addonName=None,
                message=f"Nodegroup {nodegroup_name} is currently {nodegroup.status}; "
                "an update can start only when it is ACTIVE",
            )
        version = version or cluster.version
        wanted, current, control = _minor(version), _minor(nodegroup.version), _minor(cluster.version)
        if wanted is None or control is None or wanted > control:
            raise _invalid(
                name,
                f"Requested Nodegroup version {version} is invalid for cluster version {cluster.version}",
                nodegroup_name,
            )
        if current is not None and wanted < current:
            raise _invalid(
                name,
                f"Requested Nodegroup version {version} is lower than its current version {nodegroup.version}",
                nodegroup_name,
            )
        release = f"{version}.0-{utcnow():%Y%m%d}"
        update = _record(
            self,
            name,
            nodegroup_name,
            "VersionUpdate",
            [{"type": "Version", "value": version}, {"type": "ReleaseVersion", "value": release}],
        )
        nodegroup.status = "UPDATING"

        def finish() -> None:
            nodegroup.version = version
            nodegroup.release_version = release
            update["status"] = "Successful"
            if nodegroup.status == "UPDATING":
                nodegroup.status = "ACTIVE"

        LIFECYCLE.schedule(LIFECYCLE.duration("eks.nodegroup.update", self.account_id), finish)
        return update

    def describe_update(self, name: str, update_id: str, nodegroup_name: str | None) -> dict:
        if name not in self.clusters:
            raise _not_found(name)
        update = _updates(self).get((name, nodegroup_name or None, update_id))
        if update is None:
            raise _not_found(name, update_id)
        return update

    EKSBackend.update_cluster_version = update_cluster_version
    EKSBackend.describe_update = describe_update
    EKSBackend.update_nodegroup_version = update_nodegroup_version
    wrap(EKSBackend, "create_nodegroup", make_create_nodegroup)
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
    def response_update_nodegroup_version(self) -> ActionResult:
        update = self.eks_backend.update_nodegroup_version(
            self._get_param("name"), self._get_param("nodegroupName"), self._get_param("version")
        )
        return ActionResult({"update": update})

    EKSResponse.describe_update = response_describe_update
    EKSResponse.update_nodegroup_version = response_update_nodegroup_version
