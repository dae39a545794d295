"""NAT gateways pass through pending and deleting.

AWS: NatGateway.State is pending, then available; deleting, then deleted
(deleted gateways stay visible for a while).
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_NatGateway.html
https://docs.aws.amazon.com/vpc/latest/userguide/nat-gateway-basics.html

moto 5.2.5 makes a NAT gateway available at once and deleted at once.
Durations: ``ec2.natgateway.create|delete``. Gateways made by a CloudFormation
stack are left to the stack's duration.
"""

from __future__ import annotations

from moto.ec2.models.nat_gateways import NatGatewayBackend

from ..lifecycle import LIFECYCLE
from ._common import in_cloudformation, wrap


def _seconds(backend, key: str) -> float:
    return 0.0 if in_cloudformation() else LIFECYCLE.duration(key, backend.account_id)


def apply() -> None:
    def make_create(original):
        def create_nat_gateway(self, *args, **kwargs):
            nat = original(self, *args, **kwargs)
            seconds = _seconds(self, "ec2.natgateway.create")
            if seconds > 0:
                nat.state = "pending"

                def finish():
                    if nat.state == "pending":
                        nat.state = "available"

                LIFECYCLE.schedule(seconds, finish)
            return nat

        return create_nat_gateway

    def make_delete(original):
        def delete_nat_gateway(self, nat_gateway_id):
            nat = self.nat_gateways.get(nat_gateway_id)
            seconds = _seconds(self, "ec2.natgateway.delete")
            if nat is None or seconds <= 0 or nat.state in ("deleting", "deleted"):
                return original(self, nat_gateway_id) if nat is None or seconds <= 0 else nat
            nat.state = "deleting"
            LIFECYCLE.schedule(seconds, lambda: original(self, nat_gateway_id))
            return nat

        return delete_nat_gateway

    wrap(NatGatewayBackend, "create_nat_gateway", make_create)
    wrap(NatGatewayBackend, "delete_nat_gateway", make_delete)
