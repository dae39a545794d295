"""EKS cluster updates as EKS runs them: an Update that is InProgress while
the cluster is UPDATING, then Successful, readable with DescribeUpdate.

https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateClusterVersion.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateClusterConfig.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeUpdate.html
"""

import pytest
from botocore.exceptions import ClientError
from conftest import wait_for


def _cluster(aws, account_id, version="1.32"):
    ec2 = aws("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.96.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.96.1.0/24")["Subnet"]["SubnetId"]
    aws("eks").create_cluster(
        name="ml",
        version=version,
        roleArn=f"arn:aws:iam::{account_id}:role/cluster",
        resourcesVpcConfig={"subnetIds": [subnet], "endpointPublicAccess": True, "endpointPrivateAccess": True},
    )
    return subnet


def test_version_upgrade_is_an_update_in_progress_then_successful(aws, account_id, lifecycle):
    lifecycle({"eks.cluster.create": 0, "eks.cluster.update": 0.5})
    _cluster(aws, account_id)
    eks = aws("eks")
    update = eks.update_cluster_version(name="ml", version="1.33")["update"]
    assert update["status"] == "InProgress"
    assert update["type"] == "VersionUpdate"
    assert eks.describe_cluster(name="ml")["cluster"]["status"] == "UPDATING"

    described = lambda: eks.describe_update(name="ml", updateId=update["id"])["update"]  # noqa: E731
    assert wait_for(lambda: described()["status"] == "Successful")
    cluster = eks.describe_cluster(name="ml")["cluster"]
    assert (cluster["status"], cluster["version"]) == ("ACTIVE", "1.33")


def test_a_version_upgrade_skipping_a_minor_version_or_on_a_busy_cluster_is_refused(aws, account_id, lifecycle):
    lifecycle({"eks.cluster.create": 0, "eks.cluster.update": 5})
    _cluster(aws, account_id, version="1.31")
    eks = aws("eks")
    with pytest.raises(ClientError) as err:
        eks.update_cluster_version(name="ml", version="1.33")
    assert err.value.response["Error"]["Code"] == "InvalidParameterException"
    eks.update_cluster_version(name="ml", version="1.32")
    with pytest.raises(ClientError) as err:
        eks.update_cluster_version(name="ml", version="1.33")
    assert err.value.response["Error"]["Code"] == "ResourceInUseException"


def test_endpoint_access_update_keeps_subnets_vpc_and_security_group(aws, account_id):
    subnet = _cluster(aws, account_id)
    eks = aws("eks")
    before = eks.describe_cluster(name="ml")["cluster"]["resourcesVpcConfig"]
    update = eks.update_cluster_config(name="ml", resourcesVpcConfig={"endpointPrivateAccess": False})["update"]
    assert update["type"] == "EndpointAccessUpdate"
    assert wait_for(lambda: eks.describe_update(name="ml", updateId=update["id"])["update"]["status"] == "Successful")
    after = eks.describe_cluster(name="ml")["cluster"]["resourcesVpcConfig"]
    assert after["endpointPrivateAccess"] is False
    assert after["endpointPublicAccess"] is True
    assert after["subnetIds"] == [subnet]
    assert (after["vpcId"], after["clusterSecurityGroupId"]) == (before["vpcId"], before["clusterSecurityGroupId"])


def test_a_node_group_update_can_be_described(aws, account_id):
    subnet = _cluster(aws, account_id)
    eks = aws("eks")
    role = f"arn:aws:iam::{account_id}:role/node"
    eks.create_nodegroup(clusterName="ml", nodegroupName="cpu", nodeRole=role, subnets=[subnet])
    update = eks.update_nodegroup_config(
        clusterName="ml", nodegroupName="cpu", scalingConfig={"minSize": 1, "desiredSize": 3, "maxSize": 3}
    )["update"]
    described = eks.describe_update(name="ml", updateId=update["id"], nodegroupName="cpu")["update"]
    assert described["id"] == update["id"]
    with pytest.raises(eks.exceptions.ResourceNotFoundException):
        eks.describe_update(name="ml", updateId="no-such-update")


def test_a_node_group_starts_on_the_clusters_version_and_never_on_a_newer_one(aws, account_id):
    subnet = _cluster(aws, account_id, version="1.31")
    eks = aws("eks")
    role = f"arn:aws:iam::{account_id}:role/node"
    eks.create_nodegroup(clusterName="ml", nodegroupName="cpu", nodeRole=role, subnets=[subnet])
    assert eks.describe_nodegroup(clusterName="ml", nodegroupName="cpu")["nodegroup"]["version"] == "1.31"
    with pytest.raises(ClientError) as err:
        eks.create_nodegroup(clusterName="ml", nodegroupName="gpu", nodeRole=role, subnets=[subnet], version="1.32")
    assert err.value.response["Error"]["Code"] == "InvalidParameterException"
    assert "gpu" not in eks.list_nodegroups(clusterName="ml")["nodegroups"]


def test_the_control_plane_upgrades_only_with_its_node_groups_on_its_version(aws, account_id, lifecycle):
    lifecycle({"eks.cluster.create": 0, "eks.cluster.update": 0.2, "eks.nodegroup.create": 0, "eks.nodegroup.update": 0.5})
    subnet = _cluster(aws, account_id, version="1.31")
    eks = aws("eks")
    role = f"arn:aws:iam::{account_id}:role/node"
    eks.create_nodegroup(clusterName="ml", nodegroupName="cpu", nodeRole=role, subnets=[subnet])
    update = eks.update_cluster_version(name="ml", version="1.32")["update"]
    assert wait_for(lambda: eks.describe_update(name="ml", updateId=update["id"])["update"]["status"] == "Successful")

    # The node group still runs 1.31: the next control plane upgrade is refused, naming it.
    with pytest.raises(ClientError) as err:
        eks.update_cluster_version(name="ml", version="1.33")
    assert err.value.response["Error"]["Code"] == "InvalidParameterException"
    assert "Nodegroups cpu must be updated to match cluster version 1.32" in err.value.response["Error"]["Message"]

    update = eks.update_nodegroup_version(clusterName="ml", nodegroupName="cpu", version="1.32")["update"]
    assert update["type"] == "VersionUpdate" and update["status"] == "InProgress"
    assert eks.describe_nodegroup(clusterName="ml", nodegroupName="cpu")["nodegroup"]["status"] == "UPDATING"
    with pytest.raises(ClientError) as err:
        eks.update_nodegroup_version(clusterName="ml", nodegroupName="cpu")
    assert err.value.response["Error"]["Code"] == "ResourceInUseException"
    described = lambda: eks.describe_update(name="ml", updateId=update["id"], nodegroupName="cpu")["update"]  # noqa: E731
    assert wait_for(lambda: described()["status"] == "Successful")
    group = eks.describe_nodegroup(clusterName="ml", nodegroupName="cpu")["nodegroup"]
    assert (group["status"], group["version"]) == ("ACTIVE", "1.32")
    assert group["releaseVersion"].startswith("1.32.")

    eks.update_cluster_version(name="ml", version="1.33")


def test_a_node_group_version_above_the_cluster_or_below_its_own_is_refused(aws, account_id):
    subnet = _cluster(aws, account_id, version="1.31")
    eks = aws("eks")
    role = f"arn:aws:iam::{account_id}:role/node"
    eks.create_nodegroup(clusterName="ml", nodegroupName="cpu", nodeRole=role, subnets=[subnet])
    for version in ["1.32", "1.30", "2.0"]:
        with pytest.raises(ClientError) as err:
            eks.update_nodegroup_version(clusterName="ml", nodegroupName="cpu", version=version)
        assert err.value.response["Error"]["Code"] == "InvalidParameterException", version
    with pytest.raises(eks.exceptions.ResourceNotFoundException):
        eks.update_nodegroup_version(clusterName="ml", nodegroupName="gpu", version="1.31")
