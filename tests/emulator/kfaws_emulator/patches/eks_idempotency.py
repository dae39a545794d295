"""EKS CreateCluster / CreateNodegroup honour ``clientRequestToken``.

AWS: clientRequestToken is a "unique, case-sensitive identifier that you
provide to ensure the idempotency of the request": repeating a create with
the token of the create that made the resource returns that resource instead
of ResourceInUseException.
https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateCluster.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateNodegroup.html
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/Run_Instance_Idempotency.html

moto 5.2.5 stores the token but refuses any second create of the same name.
A different token (or none) is still refused, as in AWS.
"""

from __future__ import annotations

from moto.eks.models import EKSBackend

from ._common import argument, wrap


def apply() -> None:
    def make_create_cluster(original):
        def create_cluster(self, *args, **kwargs):
            name = argument(original, "name", (self, *args), kwargs)
            token = argument(original, "client_request_token", (self, *args), kwargs)
            existing = self.clusters.get(name)
            if existing is not None and token and existing.client_request_token == token:
                return existing
            return original(self, *args, **kwargs)

        return create_cluster

    def make_create_nodegroup(original):
        def create_nodegroup(self, *args, **kwargs):
            cluster_name = argument(original, "cluster_name", (self, *args), kwargs)
            name = argument(original, "nodegroup_name", (self, *args), kwargs)
            token = argument(original, "client_request_token", (self, *args), kwargs)
            cluster = self.clusters.get(cluster_name)
            existing = cluster.nodegroups.get(name) if cluster is not None else None
            if existing is not None and token and existing.client_request_token == token:
                return existing
            return original(self, *args, **kwargs)

        return create_nodegroup

    wrap(EKSBackend, "create_cluster", make_create_cluster)
    wrap(EKSBackend, "create_nodegroup", make_create_nodegroup)
