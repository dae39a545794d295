"""AWS::IAM::Role RoleName: "Update requires: Replacement" — the role is made under the new name, the old one goes.

https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-iam-role.html#cfn-iam-role-rolename
"""

import json

import pytest
from conftest import wait_for
from templates import ASSUME_EKS

POLICY = "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy"
INLINE = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}]}


def _template():
    return json.dumps(
        {
            "Parameters": {"Name": {"Type": "String"}},
            "Resources": {
                "Role": {
                    "Type": "AWS::IAM::Role",
                    "Properties": {
                        "RoleName": {"Ref": "Name"},
                        "AssumeRolePolicyDocument": ASSUME_EKS,
                        "ManagedPolicyArns": [POLICY],
                        "Policies": [{"PolicyName": "read", "PolicyDocument": INLINE}],
                    },
                }
            },
            "Outputs": {"Arn": {"Value": {"Fn::GetAtt": ["Role", "Arn"]}}},
        }
    )


def _status(cfn):
    return cfn.describe_stacks(StackName="roles")["Stacks"][0]["StackStatus"]


def _apply(cfn, call, name):
    call(
        StackName="roles",
        TemplateBody=_template(),
        Parameters=[{"ParameterKey": "Name", "ParameterValue": name}],
        Capabilities=["CAPABILITY_NAMED_IAM"],
    )


def test_a_renamed_role_is_replaced_with_its_policies_and_the_old_one_deleted(aws):
    cfn, iam = aws("cloudformation"), aws("iam")
    _apply(cfn, cfn.create_stack, "first")
    wait_for(lambda: _status(cfn) == "CREATE_COMPLETE")
    _apply(cfn, cfn.update_stack, "second")
    assert wait_for(lambda: _status(cfn) in ("UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE") and _status(cfn)) == "UPDATE_COMPLETE"

    with pytest.raises(iam.exceptions.NoSuchEntityException):
        iam.get_role(RoleName="first")
    role = iam.get_role(RoleName="second")["Role"]
    attached = iam.list_attached_role_policies(RoleName="second")["AttachedPolicies"]
    assert [p["PolicyArn"] for p in attached] == [POLICY]
    assert iam.list_role_policies(RoleName="second")["PolicyNames"] == ["read"]
    outputs = cfn.describe_stacks(StackName="roles")["Stacks"][0]["Outputs"]
    assert outputs[0]["OutputValue"] == role["Arn"]
    physical = cfn.describe_stack_resource(StackName="roles", LogicalResourceId="Role")["StackResourceDetail"]
    assert physical["PhysicalResourceId"] == "second"


def test_a_rename_onto_a_taken_name_fails_and_keeps_the_old_role(aws):
    cfn, iam = aws("cloudformation"), aws("iam")
    iam.create_role(RoleName="taken", AssumeRolePolicyDocument=json.dumps(ASSUME_EKS))
    _apply(cfn, cfn.create_stack, "mine")
    wait_for(lambda: _status(cfn) == "CREATE_COMPLETE")
    _apply(cfn, cfn.update_stack, "taken")
    final = wait_for(lambda: _status(cfn) in ("UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE") and _status(cfn))
    assert final == "UPDATE_ROLLBACK_COMPLETE"
    assert iam.get_role(RoleName="mine")["Role"]["RoleName"] == "mine"
    assert [p["PolicyArn"] for p in iam.list_attached_role_policies(RoleName="mine")["AttachedPolicies"]] == [POLICY]
