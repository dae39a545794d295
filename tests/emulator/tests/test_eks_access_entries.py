"""EKS access configuration, access entries and access policies as EKS serves them.

https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateAccessConfigRequest.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateAccessConfigRequest.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateAccessEntry.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_AssociateAccessPolicy.html
https://docs.aws.amazon.com/eks/latest/userguide/access-entries.html
"""

import re

import pytest
from botocore.exceptions import ClientError
from conftest import wait_for

POLICY = "arn:aws:eks::aws:cluster-access-policy/"
ADMIN, VIEW, EDIT = POLICY + "AmazonEKSClusterAdminPolicy", POLICY + "AmazonEKSViewPolicy", POLICY + "AmazonEKSEditPolicy"


def _cluster(aws, account_id, name="ml", access_config=None):
    ec2 = aws("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.96.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.96.1.0/24")["Subnet"]["SubnetId"]
    extra = {"accessConfig": access_config} if access_config is not None else {}
    return aws("eks").create_cluster(
        name=name,
        version="1.32",
        roleArn=f"arn:aws:iam::{account_id}:role/cluster",
        resourcesVpcConfig={"subnetIds": [subnet]},
        **extra,
    )["cluster"]


def _code(err) -> str:
    return err.value.response["Error"]["Code"]


def _status(err) -> int:
    return err.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_access_entries_and_policies_on_an_api_and_config_map_cluster(aws, account_id):
    created = _cluster(aws, account_id, access_config={"authenticationMode": "API_AND_CONFIG_MAP"})
    assert created["accessConfig"]["authenticationMode"] == "API_AND_CONFIG_MAP"
    eks = aws("eks")
    assert eks.describe_cluster(name="ml")["cluster"]["accessConfig"]["authenticationMode"] == "API_AND_CONFIG_MAP"

    # the creator (bootstrapClusterCreatorAdminPermissions defaults to true) is a cluster admin
    creator = f"arn:aws:iam::{account_id}:user/moto"
    assert eks.list_access_entries(clusterName="ml")["accessEntries"] == [creator]
    admin = eks.list_associated_access_policies(clusterName="ml", principalArn=creator)["associatedAccessPolicies"]
    assert [(a["policyArn"], a["accessScope"]["type"]) for a in admin] == [(ADMIN, "cluster")]

    role = f"arn:aws:iam::{account_id}:role/team/ml-reader"  # a role with a path
    entry = eks.create_access_entry(
        clusterName="ml", principalArn=role, kubernetesGroups=["readers"], tags={"team": "ml"}
    )["accessEntry"]
    assert entry["principalArn"] == role
    assert entry["clusterName"] == "ml"
    assert entry["type"] == "STANDARD"
    assert entry["kubernetesGroups"] == ["readers"]
    assert entry["username"] == f"arn:aws:sts::{account_id}:assumed-role/ml-reader/{{{{SessionName}}}}"
    assert re.fullmatch(
        rf"arn:aws:eks:us-east-1:{account_id}:access-entry/ml/role/{account_id}/ml-reader/[0-9a-f-]{{36}}",
        entry["accessEntryArn"],
    ), entry["accessEntryArn"]
    assert entry["tags"] == {"team": "ml"}
    assert "createdAt" in entry and "modifiedAt" in entry

    described = eks.describe_access_entry(clusterName="ml", principalArn=role)["accessEntry"]
    assert described["accessEntryArn"] == entry["accessEntryArn"]
    assert described["tags"] == {"team": "ml"}
    assert sorted(eks.list_access_entries(clusterName="ml")["accessEntries"]) == sorted([creator, role])

    user = f"arn:aws:iam::{account_id}:user/alice"
    assert eks.create_access_entry(clusterName="ml", principalArn=user)["accessEntry"]["username"] == user

    updated = eks.update_access_entry(clusterName="ml", principalArn=role, kubernetesGroups=["a", "b"], username="r")
    assert (updated["accessEntry"]["kubernetesGroups"], updated["accessEntry"]["username"]) == (["a", "b"], "r")

    answer = eks.associate_access_policy(
        clusterName="ml", principalArn=role, policyArn=VIEW, accessScope={"type": "cluster"}
    )
    assert (answer["clusterName"], answer["principalArn"]) == ("ml", role)
    assert answer["associatedAccessPolicy"]["policyArn"] == VIEW
    assert answer["associatedAccessPolicy"]["accessScope"]["type"] == "cluster"
    eks.associate_access_policy(
        clusterName="ml", principalArn=role, policyArn=EDIT, accessScope={"type": "namespace", "namespaces": ["dev"]}
    )
    # associating it again replaces its scope
    eks.associate_access_policy(
        clusterName="ml", principalArn=role, policyArn=VIEW, accessScope={"type": "namespace", "namespaces": ["a", "b"]}
    )
    listed = eks.list_associated_access_policies(clusterName="ml", principalArn=role)
    assert (listed["clusterName"], listed["principalArn"]) == ("ml", role)
    scopes = {a["policyArn"]: a["accessScope"] for a in listed["associatedAccessPolicies"]}
    assert scopes == {
        VIEW: {"type": "namespace", "namespaces": ["a", "b"]},
        EDIT: {"type": "namespace", "namespaces": ["dev"]},
    }
    assert eks.list_access_entries(clusterName="ml", associatedPolicyArn=EDIT)["accessEntries"] == [role]

    eks.disassociate_access_policy(clusterName="ml", principalArn=role, policyArn=EDIT)
    listed = eks.list_associated_access_policies(clusterName="ml", principalArn=role)["associatedAccessPolicies"]
    assert [a["policyArn"] for a in listed] == [VIEW]
    with pytest.raises(ClientError) as err:
        eks.disassociate_access_policy(clusterName="ml", principalArn=role, policyArn=EDIT)
    assert (_code(err), _status(err)) == ("ResourceNotFoundException", 404)

    eks.delete_access_entry(clusterName="ml", principalArn=role)
    assert role not in eks.list_access_entries(clusterName="ml")["accessEntries"]
    with pytest.raises(ClientError) as err:
        eks.describe_access_entry(clusterName="ml", principalArn=role)
    assert (_code(err), _status(err)) == ("ResourceNotFoundException", 404)
    # its associations went with it
    eks.create_access_entry(clusterName="ml", principalArn=role)
    assert eks.list_associated_access_policies(clusterName="ml", principalArn=role)["associatedAccessPolicies"] == []


def test_a_config_map_cluster_refuses_access_entries(aws, account_id):
    created = _cluster(aws, account_id)  # no accessConfig: the API default, CONFIG_MAP
    assert created["accessConfig"]["authenticationMode"] == "CONFIG_MAP"
    eks = aws("eks")
    role = f"arn:aws:iam::{account_id}:role/reader"
    for call in (
        lambda: eks.create_access_entry(clusterName="ml", principalArn=role),
        lambda: eks.list_access_entries(clusterName="ml"),
        lambda: eks.describe_access_entry(clusterName="ml", principalArn=role),
    ):
        with pytest.raises(ClientError) as err:
            call()
        assert (_code(err), _status(err)) == ("InvalidRequestException", 400)
        assert "authentication mode must be set to one of [API, API_AND_CONFIG_MAP]" in str(err.value)
    with pytest.raises(ClientError) as err:
        _cluster(
            aws,
            account_id,
            name="other",
            access_config={"authenticationMode": "CONFIG_MAP", "bootstrapClusterCreatorAdminPermissions": False},
        )
    assert _code(err) == "InvalidParameterException"


def test_switching_config_map_to_api_and_config_map_admits_access_entries(aws, account_id):
    _cluster(aws, account_id)
    eks = aws("eks")
    update = eks.update_cluster_config(name="ml", accessConfig={"authenticationMode": "API_AND_CONFIG_MAP"})["update"]
    assert update["type"] == "AccessConfigUpdate"
    assert update["params"] == [{"type": "AuthenticationMode", "value": "API_AND_CONFIG_MAP"}]
    assert wait_for(lambda: eks.describe_update(name="ml", updateId=update["id"])["update"]["status"] == "Successful")
    assert eks.describe_cluster(name="ml")["cluster"]["accessConfig"]["authenticationMode"] == "API_AND_CONFIG_MAP"
    role = f"arn:aws:iam::{account_id}:role/reader"
    eks.create_access_entry(clusterName="ml", principalArn=role)
    # no creator entry: the creator was not bootstrapped by a mode switch
    assert eks.list_access_entries(clusterName="ml")["accessEntries"] == [role]


def test_authentication_mode_changes_only_one_way(aws, account_id):
    _cluster(aws, account_id, access_config={"authenticationMode": "API_AND_CONFIG_MAP"})
    _cluster(aws, account_id, name="legacy")
    eks = aws("eks")
    refused = [("ml", "CONFIG_MAP"), ("ml", "API_AND_CONFIG_MAP"), ("legacy", "API")]
    for name, mode in refused:
        with pytest.raises(ClientError) as err:
            eks.update_cluster_config(name=name, accessConfig={"authenticationMode": mode})
        assert (_code(err), _status(err)) == ("InvalidParameterException", 400)
        assert "Unsupported authentication mode update from" in str(err.value)
    update = eks.update_cluster_config(name="ml", accessConfig={"authenticationMode": "API"})["update"]
    assert wait_for(lambda: eks.describe_update(name="ml", updateId=update["id"])["update"]["status"] == "Successful")
    assert eks.describe_cluster(name="ml")["cluster"]["accessConfig"]["authenticationMode"] == "API"


def test_unknown_policy_bad_scope_bad_principal_and_duplicate_entry_are_refused(aws, account_id):
    _cluster(aws, account_id, access_config={"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False})
    eks = aws("eks")
    assert eks.list_access_entries(clusterName="ml")["accessEntries"] == []  # no creator entry when false
    role = f"arn:aws:iam::{account_id}:role/reader"
    eks.create_access_entry(clusterName="ml", principalArn=role, clientRequestToken="t1")

    with pytest.raises(ClientError) as err:
        eks.create_access_entry(clusterName="ml", principalArn=role)
    assert (_code(err), _status(err)) == ("ResourceInUseException", 409)
    # the same token is the same request: the entry, not an error
    again = eks.create_access_entry(clusterName="ml", principalArn=role, clientRequestToken="t1")["accessEntry"]
    assert again["principalArn"] == role

    with pytest.raises(ClientError) as err:
        eks.associate_access_policy(
            clusterName="ml", principalArn=role, policyArn=POLICY + "NoSuchPolicy", accessScope={"type": "cluster"}
        )
    assert (_code(err), _status(err)) == ("InvalidParameterException", 400)
    with pytest.raises(ClientError) as err:
        eks.associate_access_policy(clusterName="ml", principalArn=role, policyArn=VIEW, accessScope={"type": "namespace"})
    assert _code(err) == "InvalidParameterException"
    with pytest.raises(ClientError) as err:
        eks.associate_access_policy(
            clusterName="ml", principalArn=f"arn:aws:iam::{account_id}:role/nobody", policyArn=VIEW,
            accessScope={"type": "cluster"},
        )
    assert (_code(err), _status(err)) == ("ResourceNotFoundException", 404)
    for bad in ("reader", "arn:aws:s3:::bucket", f"arn:aws:sts::{account_id}:assumed-role/reader/session"):
        with pytest.raises(ClientError) as err:
            eks.create_access_entry(clusterName="ml", principalArn=bad)
        assert (_code(err), _status(err)) == ("InvalidParameterException", 400)
    with pytest.raises(ClientError) as err:
        eks.create_access_entry(clusterName="nope", principalArn=role)
    assert (_code(err), _status(err)) == ("ResourceNotFoundException", 404)

    names = {p["name"] for p in eks.list_access_policies()["accessPolicies"]}
    assert {"AmazonEKSClusterAdminPolicy", "AmazonEKSAdminPolicy", "AmazonEKSEditPolicy", "AmazonEKSViewPolicy"} <= names


def test_access_entry_tags_and_delete_cluster_removes_entries(aws, account_id):
    _cluster(aws, account_id, access_config={"authenticationMode": "API"})
    eks = aws("eks")
    role = f"arn:aws:iam::{account_id}:role/reader"
    arn = eks.create_access_entry(clusterName="ml", principalArn=role)["accessEntry"]["accessEntryArn"]
    eks.tag_resource(resourceArn=arn, tags={"a": "1", "b": "2"})
    eks.untag_resource(resourceArn=arn, tagKeys=["a"])
    assert eks.list_tags_for_resource(resourceArn=arn)["tags"] == {"b": "2"}

    eks.delete_cluster(name="ml")
    _cluster(aws, account_id, access_config={"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False})
    assert eks.list_access_entries(clusterName="ml")["accessEntries"] == []
    with pytest.raises(ClientError) as err:
        eks.describe_access_entry(clusterName="ml", principalArn=role)
    assert _code(err) == "ResourceNotFoundException"


def test_access_entries_are_per_account(aws, account_id, endpoint):
    import boto3

    _cluster(aws, account_id, access_config={"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False})
    aws("eks").create_access_entry(clusterName="ml", principalArn=f"arn:aws:iam::{account_id}:role/reader")
    other = "5" + account_id[1:]
    session = boto3.session.Session(aws_access_key_id=other, aws_secret_access_key="test", region_name="us-east-1")
    with pytest.raises(ClientError) as err:
        session.client("eks", endpoint_url=endpoint).list_access_entries(clusterName="ml")
    assert _code(err) == "ResourceNotFoundException"


def test_a_node_entry_gets_the_node_identity_and_takes_no_username_or_groups(aws, account_id):
    _cluster(aws, account_id, access_config={"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False})
    eks = aws("eks")
    node = f"arn:aws:iam::{account_id}:role/node"
    entry = eks.create_access_entry(clusterName="ml", principalArn=node, type="EC2_LINUX")["accessEntry"]
    assert (entry["type"], entry["username"]) == ("EC2_LINUX", "system:node:{{EC2PrivateDNSName}}")
    with pytest.raises(ClientError) as err:
        eks.create_access_entry(
            clusterName="ml", principalArn=f"arn:aws:iam::{account_id}:role/n2", type="EC2_LINUX", username="x"
        )
    assert _code(err) == "InvalidParameterException"
    with pytest.raises(ClientError) as err:
        eks.create_access_entry(clusterName="ml", principalArn=f"arn:aws:iam::{account_id}:user/u", type="EC2_LINUX")
    assert _code(err) == "InvalidParameterException"


def test_an_access_config_update_comes_alone(aws, account_id):
    _cluster(aws, account_id)
    eks = aws("eks")
    with pytest.raises(ClientError) as err:
        eks.update_cluster_config(
            name="ml",
            accessConfig={"authenticationMode": "API_AND_CONFIG_MAP"},
            resourcesVpcConfig={"endpointPrivateAccess": True},
        )
    assert _code(err) == "InvalidParameterException"
    assert eks.describe_cluster(name="ml")["cluster"]["accessConfig"]["authenticationMode"] == "CONFIG_MAP"
