"""Lifecycle latencies: resources pass through their transitional states for the configured time.

States from the API references:
EKS Cluster.status CREATING|ACTIVE|DELETING (https://docs.aws.amazon.com/eks/latest/APIReference/API_Cluster.html),
Nodegroup.status CREATING|ACTIVE|DELETING (https://docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html),
EFS LifeCycleState creating|available|deleting (https://docs.aws.amazon.com/efs/latest/ug/API_FileSystemDescription.html),
NAT gateway State pending|available|deleting|deleted (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_NatGateway.html),
stack CREATE_IN_PROGRESS / DELETE_IN_PROGRESS (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_Stack.html).
A node group can only be created on an ACTIVE cluster, a mount target only on
an available file system, and a cluster with node groups cannot be deleted.
"""

import json
import time

import pytest
from botocore.exceptions import ClientError
from conftest import wait_for

D = 1.0  # seconds each transition lasts in these tests; polls come every 0.05 s


def _history(read, until, timeout=10.0):
    """Distinct consecutive values of ``read()`` until one is in ``until``."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = read()
        if not seen or seen[-1] != value:
            seen.append(value)
        if value in until:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"no state in {until} within {timeout}s; saw {seen}")


def _network(ec2):
    vpc = ec2.create_vpc(CidrBlock="10.50.0.0/16")["Vpc"]["VpcId"]
    return ec2.create_subnet(VpcId=vpc, CidrBlock="10.50.1.0/24")["Subnet"]["SubnetId"]


def test_eks_cluster_and_nodegroup_pass_through_creating_and_deleting(aws, account_id, lifecycle):
    lifecycle(
        {
            "eks.cluster.create": D,
            "eks.cluster.delete": D,
            "eks.nodegroup.create": D,
            "eks.nodegroup.delete": D,
        }
    )
    eks = aws("eks")
    subnet = _network(aws("ec2"))
    role = f"arn:aws:iam::{account_id}:role/r"
    started = time.monotonic()
    created = eks.create_cluster(name="ml", roleArn=role, resourcesVpcConfig={"subnetIds": [subnet]})
    assert created["cluster"]["status"] == "CREATING"
    with pytest.raises(eks.exceptions.ResourceInUseException) as busy:
        eks.delete_cluster(name="ml")
    assert "currently has an update in progress" in str(busy.value)

    with pytest.raises(ClientError) as err:
        eks.create_nodegroup(clusterName="ml", nodegroupName="cpu", nodeRole=role, subnets=[subnet])
    assert err.value.response["Error"]["Code"] == "InvalidRequestException"

    cluster = lambda: eks.describe_cluster(name="ml")["cluster"]["status"]  # noqa: E731
    assert _history(cluster, {"ACTIVE"}) == ["CREATING", "ACTIVE"]
    assert time.monotonic() - started >= D

    eks.create_nodegroup(clusterName="ml", nodegroupName="cpu", nodeRole=role, subnets=[subnet])
    nodegroup = lambda: eks.describe_nodegroup(clusterName="ml", nodegroupName="cpu")["nodegroup"]["status"]  # noqa: E731
    assert _history(nodegroup, {"ACTIVE"}) == ["CREATING", "ACTIVE"]

    eks.delete_nodegroup(clusterName="ml", nodegroupName="cpu")
    assert nodegroup() == "DELETING"
    with pytest.raises(eks.exceptions.ResourceInUseException):
        eks.delete_cluster(name="ml")
    wait_for(lambda: eks.list_nodegroups(clusterName="ml")["nodegroups"] == [])

    eks.delete_cluster(name="ml")
    assert cluster() == "DELETING"
    assert eks.list_clusters()["clusters"] == ["ml"]
    wait_for(lambda: eks.list_clusters()["clusters"] == [])
    with pytest.raises(eks.exceptions.ResourceNotFoundException):
        eks.describe_cluster(name="ml")


def test_efs_file_system_and_mount_target_pass_through_creating(aws, lifecycle):
    lifecycle({"efs.filesystem.create": D, "efs.mounttarget.create": D, "efs.mounttarget.delete": D})
    efs = aws("efs")
    subnet = _network(aws("ec2"))
    fs = efs.create_file_system(CreationToken="lc", Encrypted=True)
    assert fs["LifeCycleState"] == "creating"

    with pytest.raises(ClientError) as err:
        efs.create_mount_target(FileSystemId=fs["FileSystemId"], SubnetId=subnet)
    assert err.value.response["Error"]["Code"] == "IncorrectFileSystemLifeCycleState"

    state = lambda: efs.describe_file_systems(FileSystemId=fs["FileSystemId"])["FileSystems"][0]["LifeCycleState"]  # noqa: E731
    assert _history(state, {"available"}) == ["creating", "available"]

    mount = efs.create_mount_target(FileSystemId=fs["FileSystemId"], SubnetId=subnet)
    assert mount["LifeCycleState"] == "creating"
    mount_state = lambda: efs.describe_mount_targets(MountTargetId=mount["MountTargetId"])["MountTargets"][0]["LifeCycleState"]  # noqa: E731
    assert _history(mount_state, {"available"}) == ["creating", "available"]

    efs.delete_mount_target(MountTargetId=mount["MountTargetId"])
    assert mount_state() == "deleting"
    with pytest.raises(ClientError) as err:
        efs.delete_file_system(FileSystemId=fs["FileSystemId"])
    assert err.value.response["Error"]["Code"] == "FileSystemInUse"
    wait_for(lambda: efs.describe_mount_targets(FileSystemId=fs["FileSystemId"])["MountTargets"] == [])
    efs.delete_file_system(FileSystemId=fs["FileSystemId"])


def test_nat_gateway_passes_through_pending_and_deleting(aws, lifecycle):
    lifecycle({"ec2.natgateway.create": D, "ec2.natgateway.delete": D})
    ec2 = aws("ec2")
    subnet = _network(ec2)
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    nat = ec2.create_nat_gateway(SubnetId=subnet, AllocationId=allocation)["NatGateway"]
    assert nat["State"] == "pending"

    state = lambda: ec2.describe_nat_gateways(NatGatewayIds=[nat["NatGatewayId"]])["NatGateways"][0]["State"]  # noqa: E731
    assert _history(state, {"available"}) == ["pending", "available"]
    ec2.delete_nat_gateway(NatGatewayId=nat["NatGatewayId"])
    assert _history(state, {"deleted"}) == ["deleting", "deleted"]


def test_stack_passes_through_create_and_delete_in_progress(aws, lifecycle):
    lifecycle({"cloudformation.stack.create": D, "cloudformation.stack.delete": D})
    cfn, ec2 = aws("cloudformation"), aws("ec2")
    template = json.dumps({"Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.60.0.0/16"}}}})
    stack_id = cfn.create_stack(StackName="slow", TemplateBody=template)["StackId"]
    status = lambda: cfn.describe_stacks(StackName=stack_id)["Stacks"][0]["StackStatus"]  # noqa: E731
    assert _history(status, {"CREATE_COMPLETE"}) == ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"]
    events = [e["ResourceStatus"] for e in cfn.describe_stack_events(StackName=stack_id)["StackEvents"] if e["LogicalResourceId"] == "slow"]
    assert events[0] == "CREATE_COMPLETE", "newest first: the stack's last event is its completion"

    cfn.delete_stack(StackName=stack_id)
    assert _history(status, {"DELETE_COMPLETE"}) == ["DELETE_IN_PROGRESS", "DELETE_COMPLETE"]
    assert ec2.describe_vpcs(Filters=[{"Name": "cidr", "Values": ["10.60.0.0/16"]}])["Vpcs"] == []


def test_lifecycle_settings_of_one_account_do_not_slow_another(aws, control, lifecycle):
    lifecycle({"eks.cluster.create": 30})
    status, other = control.call("GET", "/lifecycle?account_id=400000000001")
    assert status == 200
    assert other["effective_seconds"]["eks.cluster.create"] == 0


def test_unknown_lifecycle_key_is_rejected_by_name(control):
    status, body = control.call("PUT", "/lifecycle", {"durations": {"eks.clusters.create": 1}})
    assert status == 400
    assert "eks.clusters.create" in body["error"]
