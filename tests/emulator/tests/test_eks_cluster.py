"""DescribeCluster's resourcesVpcConfig as EKS fills it in.

AWS VpcConfigResponse: ``vpcId``, ``clusterSecurityGroupId`` (the security
group EKS creates for the cluster, tagged ``kubernetes.io/cluster/<name>``
and deleted with it), ``endpointPublicAccess`` (default true),
``endpointPrivateAccess`` (default false), ``publicAccessCidrs`` (default
0.0.0.0/0).
https://docs.aws.amazon.com/eks/latest/APIReference/API_VpcConfigResponse.html
https://docs.aws.amazon.com/eks/latest/userguide/sec-group-reqs.html
"""

import pytest
from botocore.exceptions import ClientError
from conftest import wait_for


def _cluster(aws, account_id, **vpc_config):
    ec2 = aws("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.95.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.95.1.0/24")["Subnet"]["SubnetId"]
    cluster = aws("eks").create_cluster(
        name="ml",
        roleArn=f"arn:aws:iam::{account_id}:role/cluster",
        resourcesVpcConfig={"subnetIds": [subnet], **vpc_config},
    )["cluster"]
    return vpc, cluster


def test_cluster_gets_vpc_id_defaults_and_a_cluster_security_group(aws, account_id):
    vpc, cluster = _cluster(aws, account_id)
    config = cluster["resourcesVpcConfig"]

    assert config["vpcId"] == vpc
    assert config["endpointPublicAccess"] is True
    assert config["endpointPrivateAccess"] is False
    assert config["publicAccessCidrs"] == ["0.0.0.0/0"]
    group = aws("ec2").describe_security_groups(GroupIds=[config["clusterSecurityGroupId"]])["SecurityGroups"][0]
    assert group["VpcId"] == vpc
    assert {"Key": "kubernetes.io/cluster/ml", "Value": "owned"} in group["Tags"]


def test_requested_endpoint_access_is_kept(aws, account_id):
    _, cluster = _cluster(aws, account_id, endpointPublicAccess=True, endpointPrivateAccess=True)
    assert cluster["resourcesVpcConfig"]["endpointPrivateAccess"] is True


def test_cluster_security_group_goes_with_the_cluster_and_then_the_vpc_can_go(aws, account_id):
    vpc, cluster = _cluster(aws, account_id)
    ec2, eks = aws("ec2"), aws("eks")
    group_id = cluster["resourcesVpcConfig"]["clusterSecurityGroupId"]
    subnet = cluster["resourcesVpcConfig"]["subnetIds"][0]

    eks.delete_cluster(name="ml")
    wait_for(lambda: eks.list_clusters()["clusters"] == [])
    with pytest.raises(ClientError):
        ec2.describe_security_groups(GroupIds=[group_id])
    ec2.delete_subnet(SubnetId=subnet)
    ec2.delete_vpc(VpcId=vpc)
