"""Idempotency tokens: a retried create with the same token returns the first result.

EKS CreateCluster / CreateNodegroup ``clientRequestToken``: "Unique,
case-sensitive identifier that you provide to ensure the idempotency of the
request" (https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateCluster.html,
https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateNodegroup.html).
EFS CreateFileSystem ``CreationToken``: a repeat returns
FileSystemAlreadyExists (HTTP 409) carrying the existing FileSystemId
(https://docs.aws.amazon.com/efs/latest/ug/API_CreateFileSystem.html).
"""

import pytest
from botocore.exceptions import ClientError

ROLE = "arn:aws:iam::{account}:role/kfaws-cluster"


def _cluster_args(ec2, account_id, token):
    vpc = ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.40.1.0/24")["Subnet"]["SubnetId"]
    return dict(
        name="ml",
        roleArn=ROLE.format(account=account_id),
        resourcesVpcConfig={"subnetIds": [subnet]},
        clientRequestToken=token,
    )


def test_create_cluster_retried_with_the_same_token_returns_the_cluster(aws, account_id):
    eks = aws("eks")
    args = _cluster_args(aws("ec2"), account_id, "token-1")
    first = eks.create_cluster(**args)["cluster"]
    again = eks.create_cluster(**args)["cluster"]

    assert again["arn"] == first["arn"]
    assert again["createdAt"] == first["createdAt"]


def test_create_cluster_with_another_token_is_refused(aws, account_id):
    eks = aws("eks")
    args = _cluster_args(aws("ec2"), account_id, "token-1")
    eks.create_cluster(**args)
    with pytest.raises(eks.exceptions.ResourceInUseException):
        eks.create_cluster(**{**args, "clientRequestToken": "token-2"})


def test_create_nodegroup_retried_with_the_same_token_returns_the_nodegroup(aws, account_id):
    eks = aws("eks")
    args = _cluster_args(aws("ec2"), account_id, "token-1")
    eks.create_cluster(**args)
    nodegroup = dict(
        clusterName="ml",
        nodegroupName="cpu",
        nodeRole=ROLE.format(account=account_id),
        subnets=args["resourcesVpcConfig"]["subnetIds"],
        clientRequestToken="ng-token",
    )
    first = eks.create_nodegroup(**nodegroup)["nodegroup"]
    again = eks.create_nodegroup(**nodegroup)["nodegroup"]
    assert again["nodegroupArn"] == first["nodegroupArn"]
    with pytest.raises(eks.exceptions.ResourceInUseException):
        eks.create_nodegroup(**{**nodegroup, "clientRequestToken": "other"})


def test_create_file_system_repeat_names_the_existing_file_system(aws):
    efs = aws("efs")
    first = efs.create_file_system(CreationToken="kfaws-ml-efs", Encrypted=True)["FileSystemId"]
    with pytest.raises(ClientError) as err:
        efs.create_file_system(CreationToken="kfaws-ml-efs", Encrypted=True)

    assert err.value.response["Error"]["Code"] == "FileSystemAlreadyExists"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 409
    assert err.value.response.get("FileSystemId") == first
    assert len(efs.describe_file_systems(CreationToken="kfaws-ml-efs")["FileSystems"]) == 1
