"""The network interface of an EFS mount target (patch efs_mount_target_interface)."""

from __future__ import annotations


def test_a_mount_targets_interface_is_in_use_requester_managed_and_goes_with_it(aws):
    ec2, efs = aws("ec2"), aws("efs")
    vpc = ec2.create_vpc(CidrBlock="10.60.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.60.1.0/24")["Subnet"]["SubnetId"]
    fs = efs.create_file_system(CreationToken="mt-eni", Encrypted=True)["FileSystemId"]
    mount = efs.create_mount_target(FileSystemId=fs, SubnetId=subnet)

    eni = ec2.describe_network_interfaces(NetworkInterfaceIds=[mount["NetworkInterfaceId"]])[
        "NetworkInterfaces"
    ][0]
    assert eni["Status"] == "in-use"
    assert eni["RequesterManaged"] is True
    assert eni["Description"] == f"EFS mount target for {fs} ({mount['MountTargetId']})"

    efs.delete_mount_target(MountTargetId=mount["MountTargetId"])
    left = ec2.describe_network_interfaces(Filters=[{"Name": "vpc-id", "Values": [vpc]}])
    assert left["NetworkInterfaces"] == []
