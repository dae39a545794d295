"""Deleting a stack deletes every resource it created, including the EC2 networking resources.

AWS: "DeleteStack deletes a specified stack ... all resources in the stack are
deleted" unless DeletionPolicy Retain
(https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DeleteStack.html).
moto 5.2.5 has no deletion for AWS::EC2::RouteTable, Route,
SubnetRouteTableAssociation, InternetGateway, VPCGatewayAttachment,
VPCEndpoint, NatGateway and EIP.
"""

import json

from conftest import wait_for
from templates import ASSUME_EKS, network


def _stack_status(cfn, stack_id):
    return cfn.describe_stacks(StackName=stack_id)["Stacks"][0]["StackStatus"]


def test_network_stack_deletion_leaves_no_ec2_resource(aws):
    cfn, ec2 = aws("cloudformation"), aws("ec2")
    stack_id = cfn.create_stack(StackName="network", TemplateBody=network())["StackId"]
    wait_for(lambda: _stack_status(cfn, stack_id) == "CREATE_COMPLETE")
    resources = {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in cfn.describe_stack_resources(StackName=stack_id)["StackResources"]
    }
    vpc_id = resources["Vpc"]

    cfn.delete_stack(StackName=stack_id)
    final = wait_for(lambda: _stack_status(cfn, stack_id) in ("DELETE_COMPLETE", "DELETE_FAILED") and _stack_status(cfn, stack_id))

    assert final == "DELETE_COMPLETE"
    assert ec2.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["Vpcs"] == []
    assert ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["RouteTables"] == []
    assert ec2.describe_internet_gateways()["InternetGateways"] == []
    assert [
        e for e in ec2.describe_vpc_endpoints()["VpcEndpoints"] if e["State"].lower() != "deleted"
    ] == []
    assert [n for n in ec2.describe_nat_gateways()["NatGateways"] if n["State"] != "deleted"] == []
    assert ec2.describe_addresses()["Addresses"] == []
    assert ec2.describe_network_interfaces()["NetworkInterfaces"] == []
    assert ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["Subnets"] == []


def test_resources_are_deleted_in_reverse_dependency_order(aws):
    """Each resource's DELETE_COMPLETE event comes before those of the resources it refers to."""
    cfn = aws("cloudformation")
    stack_id = cfn.create_stack(StackName="network", TemplateBody=network())["StackId"]
    wait_for(lambda: _stack_status(cfn, stack_id) == "CREATE_COMPLETE")
    cfn.delete_stack(StackName=stack_id)
    wait_for(lambda: _stack_status(cfn, stack_id) == "DELETE_COMPLETE")

    events = reversed(cfn.describe_stack_events(StackName=stack_id)["StackEvents"])  # oldest first
    deleted = [e["LogicalResourceId"] for e in events if e["ResourceStatus"] == "DELETE_COMPLETE" and e["LogicalResourceId"] != "network"]
    assert sorted(deleted) == sorted(json.loads(network())["Resources"])
    for dependent, dependency in [
        ("S3Endpoint", "PrivateRouteTable"),
        ("PrivateDefaultRoute", "Nat"),
        ("PublicDefaultRoute", "IgwAttachment"),
        ("IgwAttachment", "Igw"),
        ("Nat", "NatEip"),
        ("Nat", "PublicSubnet"),
        ("PrivateAssociation", "PrivateSubnet"),
        ("PublicSubnet", "Vpc"),
        ("NfsSecurityGroup", "Vpc"),
    ]:
        assert deleted.index(dependent) < deleted.index(dependency), (dependent, dependency)


def test_a_resource_deleted_outside_cloudformation_counts_as_deleted(aws):
    # A delete handler answers NotFound for a resource that no longer exists,
    # and the stack's deletion goes on (resource type handler contract).
    cfn, iam = aws("cloudformation"), aws("iam")
    template = {
        "Resources": {
            "Gone": {
                "Type": "AWS::IAM::Role",
                "Properties": {"RoleName": "deleted-by-hand", "AssumeRolePolicyDocument": ASSUME_EKS},
            },
            "Kept": {
                "Type": "AWS::IAM::Role",
                "Properties": {"RoleName": "still-there", "AssumeRolePolicyDocument": ASSUME_EKS},
            },
        }
    }
    stack_id = cfn.create_stack(
        StackName="roles", TemplateBody=json.dumps(template), Capabilities=["CAPABILITY_NAMED_IAM"]
    )["StackId"]
    wait_for(lambda: _stack_status(cfn, stack_id) == "CREATE_COMPLETE")
    iam.delete_role(RoleName="deleted-by-hand")

    cfn.delete_stack(StackName=stack_id)
    final = wait_for(lambda: _stack_status(cfn, stack_id) in ("DELETE_COMPLETE", "DELETE_FAILED") and _stack_status(cfn, stack_id))

    assert final == "DELETE_COMPLETE"
    roles = [r["RoleName"] for r in iam.list_roles()["Roles"]]
    assert "still-there" not in roles
    events = cfn.describe_stack_events(StackName=stack_id)["StackEvents"]
    assert ("Gone", "DELETE_COMPLETE") in {(e["LogicalResourceId"], e["ResourceStatus"]) for e in events}


def test_delete_stack_resent_with_its_token_starts_no_new_delete(aws):
    # A network interface in the subnet makes the subnet's deletion, and so the stack's, fail.
    cfn, ec2 = aws("cloudformation"), aws("ec2")
    template = {
        "Resources": {
            "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.42.0.0/16"}},
            "Subnet": {
                "Type": "AWS::EC2::Subnet",
                "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.42.1.0/24"},
            },
        }
    }
    stack_id = cfn.create_stack(StackName="tokens", TemplateBody=json.dumps(template))["StackId"]
    wait_for(lambda: _stack_status(cfn, stack_id) == "CREATE_COMPLETE")
    subnet = cfn.describe_stack_resource(StackName=stack_id, LogicalResourceId="Subnet")[
        "StackResourceDetail"
    ]["PhysicalResourceId"]
    eni = ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]

    def ended():
        status = _stack_status(cfn, stack_id)
        return not status.endswith("_IN_PROGRESS") and status

    cfn.delete_stack(StackName=stack_id, ClientRequestToken="first")
    assert wait_for(ended) == "DELETE_FAILED"
    ec2.delete_network_interface(NetworkInterfaceId=eni)

    cfn.delete_stack(StackName=stack_id, ClientRequestToken="first")
    assert _stack_status(cfn, stack_id) == "DELETE_FAILED"

    cfn.delete_stack(StackName=stack_id, ClientRequestToken="second")
    assert wait_for(ended) == "DELETE_COMPLETE"
