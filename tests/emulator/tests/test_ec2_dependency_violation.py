"""DeleteVpc and DeleteSubnet refuse with DependencyViolation while something still uses them.

AWS: "You must detach or delete all gateways and resources that are associated
with the VPC before you can delete it" -- internet gateways, endpoints,
security groups, network interfaces
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DeleteVpc.html);
"You must terminate all running instances in the subnet before you can delete
the subnet" -- and any network interface in it
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DeleteSubnet.html).
A deleted NAT gateway releases its network interface
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DeleteNatGateway.html).
"""

import pytest
from botocore.exceptions import ClientError


def _vpc(ec2, cidr="10.30.0.0/16"):
    return ec2.create_vpc(CidrBlock=cidr)["Vpc"]["VpcId"]


def _subnet(ec2, vpc_id, cidr="10.30.1.0/24"):
    return ec2.create_subnet(VpcId=vpc_id, CidrBlock=cidr)["Subnet"]["SubnetId"]


def _refused(call, **kwargs):
    with pytest.raises(ClientError) as err:
        call(**kwargs)
    return err.value.response["Error"]["Code"]


def test_vpc_with_attached_internet_gateway_is_not_deletable(aws):
    ec2 = aws("ec2")
    vpc_id = _vpc(ec2)
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc_id)

    assert _refused(ec2.delete_vpc, VpcId=vpc_id) == "DependencyViolation"
    ec2.detach_internet_gateway(InternetGatewayId=igw, VpcId=vpc_id)
    ec2.delete_vpc(VpcId=vpc_id)


def test_vpc_with_an_endpoint_is_not_deletable(aws):
    ec2 = aws("ec2")
    vpc_id = _vpc(ec2)
    endpoint = ec2.create_vpc_endpoint(
        VpcId=vpc_id, ServiceName="com.amazonaws.us-east-1.s3", VpcEndpointType="Gateway"
    )["VpcEndpoint"]["VpcEndpointId"]

    assert _refused(ec2.delete_vpc, VpcId=vpc_id) == "DependencyViolation"
    ec2.delete_vpc_endpoints(VpcEndpointIds=[endpoint])
    ec2.delete_vpc(VpcId=vpc_id)


def test_vpc_with_a_security_group_is_not_deletable(aws):
    ec2 = aws("ec2")
    vpc_id = _vpc(ec2)
    group = ec2.create_security_group(GroupName="lb", Description="left by a controller", VpcId=vpc_id)["GroupId"]

    assert _refused(ec2.delete_vpc, VpcId=vpc_id) == "DependencyViolation"
    ec2.delete_security_group(GroupId=group)
    ec2.delete_vpc(VpcId=vpc_id)


def test_subnet_with_a_network_interface_is_not_deletable(aws):
    ec2 = aws("ec2")
    subnet_id = _subnet(ec2, _vpc(ec2))
    eni = ec2.create_network_interface(SubnetId=subnet_id)["NetworkInterface"]["NetworkInterfaceId"]

    assert _refused(ec2.delete_subnet, SubnetId=subnet_id) == "DependencyViolation"
    ec2.delete_network_interface(NetworkInterfaceId=eni)
    ec2.delete_subnet(SubnetId=subnet_id)


def test_subnet_is_deletable_once_its_nat_gateway_is_deleted(aws):
    ec2 = aws("ec2")
    subnet_id = _subnet(ec2, _vpc(ec2))
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    nat = ec2.create_nat_gateway(SubnetId=subnet_id, AllocationId=allocation)["NatGateway"]["NatGatewayId"]

    assert _refused(ec2.delete_subnet, SubnetId=subnet_id) == "DependencyViolation"
    ec2.delete_nat_gateway(NatGatewayId=nat)
    ec2.delete_subnet(SubnetId=subnet_id)
    # The NAT gateway's address is free again and can be released.
    ec2.release_address(AllocationId=allocation)


def test_subnet_with_an_efs_mount_target_is_not_deletable(aws):
    ec2, efs = aws("ec2"), aws("efs")
    subnet_id = _subnet(ec2, _vpc(ec2))
    fs = efs.create_file_system(CreationToken="dv")["FileSystemId"]
    mount = efs.create_mount_target(FileSystemId=fs, SubnetId=subnet_id)["MountTargetId"]

    assert _refused(ec2.delete_subnet, SubnetId=subnet_id) == "DependencyViolation"
    efs.delete_mount_target(MountTargetId=mount)
    ec2.delete_subnet(SubnetId=subnet_id)
