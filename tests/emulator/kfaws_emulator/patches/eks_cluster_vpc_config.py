"""EKS fills in a cluster's ``resourcesVpcConfig`` and owns a cluster security group.

AWS VpcConfigResponse: ``vpcId`` of the subnets, ``clusterSecurityGroupId``
(a security group EKS creates in that VPC, tagged
``kubernetes.io/cluster/<name>: owned``, deleted with the cluster),
``endpointPublicAccess`` (default true), ``endpointPrivateAccess`` (default
false), ``publicAccessCidrs`` (default ``["0.0.0.0/0"]``).
https://docs.aws.amazon.com/eks/latest/APIReference/API_VpcConfigResponse.html
https://docs.aws.amazon.com/eks/latest/userguide/sec-group-reqs.html

moto 5.2.5 echoes the request's config only: no VPC id, no cluster security
group (one of kfaws' outputs), no defaults.
"""

from __future__ import annotations

from moto.ec2.models import ec2_backends
from moto.eks.models import EKSBackend

from ._common import wrap

_DEFAULTS = {"endpointPublicAccess": True, "endpointPrivateAccess": False, "publicAccessCidrs": ["0.0.0.0/0"]}


def apply() -> None:
    def make_create_cluster(original):
        def create_cluster(self, *args, **kwargs):
            existing = set(self.clusters)
            cluster = original(self, *args, **kwargs)
            if cluster.name in existing:
                return cluster  # an idempotent repeat: already filled in
            config = cluster.resources_vpc_config
            for key, value in _DEFAULTS.items():
                config.setdefault(key, value)
            subnets = config.get("subnetIds") or []
            if subnets:
                ec2 = ec2_backends[self.account_id][self.region_name]
                vpc_id = ec2.get_subnet(subnets[0]).vpc_id
                group = ec2.create_security_group(
                    name=f"eks-cluster-sg-{cluster.name}",
                    description="EKS created security group applied to ENI that is attached to EKS "
                    "Control Plane master nodes, as well as any managed workloads.",
                    vpc_id=vpc_id,
                    tags={f"kubernetes.io/cluster/{cluster.name}": "owned"},
                )
                config["vpcId"] = vpc_id
                config["clusterSecurityGroupId"] = group.id
            return cluster

        return create_cluster

    def make_delete_cluster(original):
        def delete_cluster(self, name):
            cluster = original(self, name)
            group_id = cluster.resources_vpc_config.get("clusterSecurityGroupId")
            if name not in self.clusters and group_id:
                ec2_backends[self.account_id][self.region_name].delete_security_group(group_id=group_id)
            return cluster

        return delete_cluster

    wrap(EKSBackend, "create_cluster", make_create_cluster)
    wrap(EKSBackend, "delete_cluster", make_delete_cluster)
