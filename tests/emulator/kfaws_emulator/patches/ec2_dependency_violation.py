"""DeleteVpc and DeleteSubnet refuse with DependencyViolation while something still uses them.

AWS DeleteVpc: "You must detach or delete all gateways and resources that are
associated with the VPC before you can delete it. For example, you must
terminate all instances running in the VPC, delete all security groups
associated with the VPC (except the default one), delete all route tables
associated with the VPC (except the default one), and so on."
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DeleteVpc.html)
AWS DeleteSubnet: "You must terminate all running instances in the subnet
before you can delete the subnet" -- any network interface in it blocks it
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DeleteSubnet.html).
AWS DeleteNatGateway: "Deleting a public NAT gateway disassociates its
Elastic IP address, but does not release the address ... and deletes the
network interface"
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DeleteNatGateway.html).

moto 5.2.5's DeleteVpc checks subnets, VPN gateways and route tables only
(not internet gateways, endpoints or security groups); its DeleteSubnet
checks nothing and leaves the subnet's route table associations behind; its
DeleteNatGateway keeps the network interface.
"""

from __future__ import annotations

from moto.ec2.exceptions import DependencyViolationError
from moto.ec2.models.nat_gateways import NatGatewayBackend
from moto.ec2.models.subnets import SubnetBackend
from moto.ec2.models.vpcs import VPCBackend

from ._common import wrap


def _vpc_dependencies(ec2, vpc_id: str) -> list[str]:
    found = [igw.id for igw in ec2.internet_gateways.values() if igw.vpc is not None and igw.vpc.id == vpc_id]
    found += [
        e.id for e in ec2.vpc_end_points.values() if e.vpc_id == vpc_id and str(e.state).lower() != "deleted"
    ]
    found += [g.id for g in ec2.groups.get(vpc_id, {}).values() if g.name != "default"]
    return found


def _subnet_dependencies(ec2, subnet_id: str) -> list[str]:
    found = [eni.id for eni in ec2.enis.values() if eni.subnet is not None and eni.subnet.id == subnet_id]
    found += [n.id for n in ec2.nat_gateways.values() if n.subnet_id == subnet_id and n.state != "deleted"]
    return found


def apply() -> None:
    def make_delete_vpc(original):
        def delete_vpc(self, vpc_id):
            if _vpc_dependencies(self, vpc_id):
                raise DependencyViolationError(f"The vpc '{vpc_id}' has dependencies and cannot be deleted.")
            return original(self, vpc_id)

        return delete_vpc

    def make_delete_subnet(original):
        def delete_subnet(self, subnet_id):
            if _subnet_dependencies(self, subnet_id):
                raise DependencyViolationError(
                    f"The subnet '{subnet_id}' has dependencies and cannot be deleted."
                )
            subnet = original(self, subnet_id)
            # A deleted subnet leaves no route table association behind.
            for table in self.route_tables.values():
                for association_id, target in list(table._associations.items()):
                    if target == subnet_id:
                        del table._associations[association_id]
            return subnet

        return delete_subnet

    def make_delete_nat_gateway(original):
        def delete_nat_gateway(self, nat_gateway_id):
            nat = original(self, nat_gateway_id)
            eni = getattr(nat, "_eni", None)
            if eni is not None and eni.id in self.enis:
                for address in list(self.addresses):
                    if address.eni is eni:
                        self.disassociate_address(address=address.public_ip)
                self.enis.pop(eni.id, None)
            return nat

        return delete_nat_gateway

    wrap(VPCBackend, "delete_vpc", make_delete_vpc)
    wrap(SubnetBackend, "delete_subnet", make_delete_subnet)
    wrap(NatGatewayBackend, "delete_nat_gateway", make_delete_nat_gateway)
