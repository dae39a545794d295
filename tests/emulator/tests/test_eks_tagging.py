"""EKS TagResource, UntagResource and ListTagsForResource on a cluster and a
node group, several keys untagged at once (patch ``eks_tagging``).
https://docs.aws.amazon.com/eks/latest/APIReference/API_UntagResource.html
"""

import pytest
from botocore.exceptions import ClientError


def _cluster_and_group(aws, account_id):
    ec2 = aws("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.96.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.96.1.0/24")["Subnet"]["SubnetId"]
    eks = aws("eks")
    cluster = eks.create_cluster(
        name="tagged",
        roleArn=f"arn:aws:iam::{account_id}:role/cluster",
        resourcesVpcConfig={"subnetIds": [subnet]},
        tags={"a": "1", "b": "2", "c": "3"},
    )["cluster"]
    group = eks.create_nodegroup(
        clusterName="tagged",
        nodegroupName="cpu",
        subnets=[subnet],
        nodeRole=f"arn:aws:iam::{account_id}:role/node",
        tags={"a": "1", "b": "2", "c": "3"},
    )["nodegroup"]
    return eks, cluster["arn"], group["nodegroupArn"]


def test_untag_removes_every_key_named_on_a_cluster_and_a_node_group(aws, account_id):
    eks, cluster, group = _cluster_and_group(aws, account_id)
    for arn in (cluster, group):
        eks.untag_resource(resourceArn=arn, tagKeys=["a", "b"])
        assert eks.list_tags_for_resource(resourceArn=arn)["tags"] == {"c": "3"}


def test_a_node_group_is_tagged_and_its_tags_are_listed_and_described(aws, account_id):
    eks, _, group = _cluster_and_group(aws, account_id)
    eks.tag_resource(resourceArn=group, tags={"b": "changed", "d": "4"})
    assert eks.list_tags_for_resource(resourceArn=group)["tags"] == {"a": "1", "b": "changed", "c": "3", "d": "4"}
    described = eks.describe_nodegroup(clusterName="tagged", nodegroupName="cpu")["nodegroup"]
    assert described["tags"]["b"] == "changed"


def test_an_unknown_arn_is_not_found(aws, account_id):
    eks, cluster, _ = _cluster_and_group(aws, account_id)
    with pytest.raises(ClientError) as e:
        eks.tag_resource(resourceArn=cluster + "-missing", tags={"x": "y"})
    assert e.value.response["Error"]["Code"] in ("NotFoundException", "ResourceNotFoundException")
