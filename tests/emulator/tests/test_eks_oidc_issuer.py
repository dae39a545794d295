"""Each EKS cluster has its own OIDC issuer, also one re-created under the
same name (patch ``eks_oidc_issuer``).
https://docs.aws.amazon.com/eks/latest/APIReference/API_OIDC.html
"""

import re

ISSUER = re.compile(r"^https://oidc\.eks\.us-east-1\.amazonaws\.com/id/[0-9A-F]{32}$")


def _create(eks, subnet, account_id, name):
    return eks.create_cluster(
        name=name,
        roleArn=f"arn:aws:iam::{account_id}:role/cluster",
        resourcesVpcConfig={"subnetIds": [subnet]},
    )["cluster"]["identity"]["oidc"]["issuer"]


def test_clusters_have_their_own_issuer_and_a_re_created_one_a_new_one(aws, account_id):
    ec2 = aws("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.97.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.97.1.0/24")["Subnet"]["SubnetId"]
    eks = aws("eks")
    first = _create(eks, subnet, account_id, "one")
    second = _create(eks, subnet, account_id, "two")
    assert ISSUER.match(first) and ISSUER.match(second), (first, second)
    assert first != second
    # DescribeCluster answers the issuer CreateCluster did.
    assert eks.describe_cluster(name="one")["cluster"]["identity"]["oidc"]["issuer"] == first
    eks.delete_cluster(name="one")
    again = _create(eks, subnet, account_id, "one")
    assert ISSUER.match(again) and again != first
