"""Every EKS cluster gets its own OIDC issuer.

AWS Cluster: ``identity.oidc.issuer`` is the issuer URL of the cluster's
OpenID Connect identity provider,
``https://oidc.eks.<region>.amazonaws.com/id/<ID>``, where the ID (32
upper-case hexadecimal digits) is the cluster's own: a cluster deleted and
created again under the same name gets a new one, and the IAM OIDC provider
(and every IRSA trust policy naming the old issuer) must follow.
https://docs.aws.amazon.com/eks/latest/APIReference/API_OIDC.html
https://docs.aws.amazon.com/eks/latest/userguide/enable-iam-roles-for-service-accounts.html

moto 5.2.5 draws one random ID when the module is imported and gives it to
every cluster of the process, so a replaced cluster kept its issuer and the
path that re-creates the IAM OIDC provider for a new issuer was never taken.
"""

from __future__ import annotations

import uuid

from moto.eks.models import Cluster

from ._common import wrap


def issuer(region: str) -> str:
    """A new issuer URL for a cluster in ``region``."""
    return f"https://oidc.eks.{region}.amazonaws.com/id/{uuid.uuid4().hex.upper()}"


def apply() -> None:
    def init(original):
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            region = self.arn.split(":")[3]
            self.identity = {"oidc": {"issuer": issuer(region)}}

        return __init__

    wrap(Cluster, "__init__", init)
