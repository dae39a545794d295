"""Deleting a stack deletes its EC2 networking resources.

AWS: DeleteStack deletes every resource of the stack that has no
``DeletionPolicy: Retain``
(https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DeleteStack.html),
each through its service's delete call: DeleteRouteTable, DeleteRoute,
DisassociateRouteTable, DetachInternetGateway / DetachVpnGateway,
DeleteInternetGateway, DeleteVpcEndpoints, DeleteNatGateway, ReleaseAddress
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/).

moto 5.2.5 has no deletion for these resource types, so their stack's
deletion leaves them behind and then fails on the VPC. moto's stack deletion
retries resources that fail with a dependency error until no progress is
made, so the order of these calls needs no care here.
"""

from __future__ import annotations

from moto.ec2.models import ec2_backends
from moto.ec2.models.elastic_ip_addresses import ElasticAddress
from moto.ec2.models.internet_gateways import InternetGateway
from moto.ec2.models.nat_gateways import NatGateway
from moto.ec2.models.route_tables import Route, RouteTable
from moto.ec2.models.subnets import SubnetRouteTableAssociation
from moto.ec2.models.vpcs import VPCEndPoint
from moto.ec2.models.vpn_gateway import VPCGatewayAttachment


def _ec2(account_id: str, region_name: str):
    return ec2_backends[account_id][region_name]


def _delete_route_table(self, account_id, region_name):
    _ec2(account_id, region_name).delete_route_table(self.id)


def _delete_route(self, account_id, region_name):
    ec2 = _ec2(account_id, region_name)
    table = ec2.route_tables.get(self.route_table.id)
    if table is None or self.id not in table._routes:
        return  # deleting a route table deletes its routes (DeleteRouteTable)
    ec2.delete_route(
        self.route_table.id,
        self.destination_cidr_block,
        destination_ipv6_cidr_block=self.destination_ipv6_cidr_block,
        destination_prefix_list_id=getattr(self.destination_prefix_list, "id", self.destination_prefix_list),
    )


def _delete_association(self, account_id, region_name):
    ec2 = _ec2(account_id, region_name)
    table = ec2.route_tables.get(self.route_table_id)
    if table is None:
        return  # went with its route table
    for association_id, target in list(table._associations.items()):
        if target == self.subnet_id:
            ec2.disassociate_route_table(association_id)


def _delete_attachment(self, account_id, region_name):
    ec2 = _ec2(account_id, region_name)
    if self.gateway_id.startswith("igw-"):
        ec2.detach_internet_gateway(self.gateway_id, self.vpc_id)
    else:
        ec2.detach_vpn_gateway(vpn_gateway_id=self.gateway_id, vpc_id=self.vpc_id)


def _delete_internet_gateway(self, account_id, region_name):
    _ec2(account_id, region_name).delete_internet_gateway(self.id)


def _delete_vpc_endpoint(self, account_id, region_name):
    _ec2(account_id, region_name).delete_vpc_endpoints([self.id])


def _delete_nat_gateway(self, account_id, region_name):
    _ec2(account_id, region_name).delete_nat_gateway(self.id)


def _release_address(self, account_id, region_name):
    ec2 = _ec2(account_id, region_name)
    if self.allocation_id:
        ec2.release_address(allocation_id=self.allocation_id)
    else:
        ec2.release_address(address=self.public_ip)


def apply() -> None:
    # moto's stack deletion calls ``resource.delete(account_id, region_name)``
    # on each parsed resource; these types had none.
    RouteTable.delete = _delete_route_table
    Route.delete = _delete_route
    SubnetRouteTableAssociation.delete = _delete_association
    VPCGatewayAttachment.delete = _delete_attachment
    InternetGateway.delete = _delete_internet_gateway
    VPCEndPoint.delete = _delete_vpc_endpoint
    NatGateway.delete = _delete_nat_gateway
    ElasticAddress.delete = _release_address
