"""EKS clusters and node groups pass through CREATING and DELETING.

AWS: Cluster.status and Nodegroup.status are CREATING, then ACTIVE; DELETING,
then the resource is gone (DescribeCluster: ResourceNotFoundException). A
node group needs an ACTIVE cluster, and a cluster with node groups (in any
state) cannot be deleted (ResourceInUseException), nor can a cluster still
CREATING ("Cannot delete because cluster … currently has an update in
progress", as eksctl-io/eksctl#1069 and aws/containers-roadmap#1511 quote it).
https://docs.aws.amazon.com/eks/latest/APIReference/API_Cluster.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_DeleteCluster.html

moto 5.2.5 creates both ACTIVE and deletes them at once. Durations:
``eks.cluster.create|delete``, ``eks.nodegroup.create|delete`` (lifecycle.py).
"""

from __future__ import annotations

from moto.eks.exceptions import ResourceInUseException
from moto.eks.models import EKSBackend, validate_safe_to_delete

from ..lifecycle import LIFECYCLE
from ._common import argument, wrap


def _activate(resource) -> None:
    if resource.status == "CREATING":
        resource.status = "ACTIVE"


def apply() -> None:
    def make_create_cluster(original):
        def create_cluster(self, *args, **kwargs):
            name = argument(original, "name", (self, *args), kwargs)
            existed = name in self.clusters
            cluster = original(self, *args, **kwargs)
            seconds = LIFECYCLE.duration("eks.cluster.create", self.account_id)
            if not existed and seconds > 0:
                cluster.status = "CREATING"
                LIFECYCLE.schedule(seconds, lambda: _activate(cluster))
            return cluster

        return create_cluster

    def make_delete_cluster(original):
        def delete_cluster(self, name):
            cluster = self.clusters.get(name)
            seconds = LIFECYCLE.duration("eks.cluster.delete", self.account_id)
            if cluster is None or seconds <= 0:
                return original(self, name)
            if cluster.status == "CREATING":
                raise ResourceInUseException(
                    clusterName=name,
                    nodegroupName=None,
                    addonName=None,
                    message=f"Cannot delete because cluster {name} currently has an update in progress",
                )
            if cluster.status != "DELETING":
                validate_safe_to_delete(cluster)
                cluster.status = "DELETING"
                LIFECYCLE.schedule(seconds, lambda: self.clusters.get(name) is cluster and original(self, name))
            return cluster

        return delete_cluster

    def make_create_nodegroup(original):
        def create_nodegroup(self, *args, **kwargs):
            cluster_name = argument(original, "cluster_name", (self, *args), kwargs)
            name = argument(original, "nodegroup_name", (self, *args), kwargs)
            cluster = self.clusters.get(cluster_name)
            existed = cluster is not None and name in cluster.nodegroups
            nodegroup = original(self, *args, **kwargs)
            seconds = LIFECYCLE.duration("eks.nodegroup.create", self.account_id)
            if not existed and seconds > 0:
                nodegroup.status = "CREATING"
                LIFECYCLE.schedule(seconds, lambda: _activate(nodegroup))
            return nodegroup

        return create_nodegroup

    def make_delete_nodegroup(original):
        def delete_nodegroup(self, cluster_name, nodegroup_name):
            cluster = self.clusters.get(cluster_name)
            nodegroup = cluster.nodegroups.get(nodegroup_name) if cluster is not None else None
            seconds = LIFECYCLE.duration("eks.nodegroup.delete", self.account_id)
            if nodegroup is None or seconds <= 0:
                return original(self, cluster_name, nodegroup_name)
            if nodegroup.status != "DELETING":
                nodegroup.status = "DELETING"

                def finish():
                    if cluster.nodegroups.get(nodegroup_name) is nodegroup:
                        original(self, cluster_name, nodegroup_name)

                LIFECYCLE.schedule(seconds, finish)
            return nodegroup

        return delete_nodegroup

    wrap(EKSBackend, "create_cluster", make_create_cluster)
    wrap(EKSBackend, "delete_cluster", make_delete_cluster)
    wrap(EKSBackend, "create_nodegroup", make_create_nodegroup)
    wrap(EKSBackend, "delete_nodegroup", make_delete_nodegroup)
