"""DetectStackResourceDrift on an AWS::IAM::Role: expected (template, resolved) vs actual properties.

https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DetectStackResourceDrift.html
"""

import json

from conftest import wait_for
from templates import ASSUME_EKS

SCOPED = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "Bucket",
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject"],
            "Resource": {"Fn::Sub": "arn:${AWS::Partition}:s3:::${Bucket}/*"},
        },
        {
            "Sid": "Tagged",
            "Effect": "Allow",
            "Action": "elasticfilesystem:CreateAccessPoint",
            "Resource": "*",
            "Condition": {"StringLike": {"aws:RequestTag/efs.csi.aws.com/cluster": "true"}},
        },
    ],
}


EXTRA = {"Version": "2012-10-17", "Statement": {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "*"}}


def _template():
    return json.dumps(
        {
            "Parameters": {"Bucket": {"Type": "String"}},
            "Resources": {
                "Role": {
                    "Type": "AWS::IAM::Role",
                    "Properties": {
                        "RoleName": "kfaws-drift",
                        "AssumeRolePolicyDocument": ASSUME_EKS,
                        "Policies": [{"PolicyName": "scoped", "PolicyDocument": SCOPED}],
                    },
                },
                "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "kfaws-drift"}},
            },
        }
    )


def _stack(cfn):
    cfn.create_stack(
        StackName="drift",
        TemplateBody=_template(),
        Parameters=[{"ParameterKey": "Bucket", "ParameterValue": "artifacts"}],
        Capabilities=["CAPABILITY_NAMED_IAM"],
    )
    wait_for(lambda: cfn.describe_stacks(StackName="drift")["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE")


def _drift(cfn, logical_id="Role"):
    return cfn.detect_stack_resource_drift(StackName="drift", LogicalResourceId=logical_id)["StackResourceDrift"]


def test_a_role_as_the_template_made_it_is_in_sync_with_intrinsics_resolved(aws):
    cfn = aws("cloudformation")
    _stack(cfn)
    drift = _drift(cfn)
    assert drift["StackResourceDriftStatus"] == "IN_SYNC", drift
    assert drift["PhysicalResourceId"] == "kfaws-drift"
    expected = json.loads(drift["ExpectedProperties"])
    statement = expected["Policies"][0]["PolicyDocument"]["Statement"][0]
    assert statement["Resource"] == "arn:aws:s3:::artifacts/*"
    assert drift.get("PropertyDifferences", []) == []
    # The document IAM holds is the resolved JSON too (boto3 decodes it).
    live = aws("iam").get_role_policy(RoleName="kfaws-drift", PolicyName="scoped")["PolicyDocument"]
    assert live["Statement"][0]["Resource"] == "arn:aws:s3:::artifacts/*"


def test_an_inline_policy_edited_outside_the_stack_is_modified_at_its_path(aws):
    cfn, iam = aws("cloudformation"), aws("iam")
    _stack(cfn)
    edited = json.loads(json.dumps(SCOPED))
    edited["Statement"][0]["Resource"] = "*"
    edited["Statement"][1]["Action"] = ["elasticfilesystem:CreateAccessPoint"]  # same, spelt as a list
    iam.put_role_policy(RoleName="kfaws-drift", PolicyName="scoped", PolicyDocument=json.dumps(edited))
    drift = _drift(cfn)
    assert drift["StackResourceDriftStatus"] == "MODIFIED"
    assert drift["PropertyDifferences"] == [
        {
            "PropertyPath": "/Policies/0/PolicyDocument/Statement/0/Resource",
            "ExpectedValue": '["arn:aws:s3:::artifacts/*"]',
            "ActualValue": '["*"]',
            "DifferenceType": "NOT_EQUAL",
        }
    ]
    actual = json.loads(drift["ActualProperties"])
    assert actual["Policies"][0]["PolicyDocument"]["Statement"][0]["Resource"] == "*"


def test_an_inline_policy_deleted_or_added_outside_the_stack_is_removed_or_added(aws):
    cfn, iam = aws("cloudformation"), aws("iam")
    _stack(cfn)
    iam.put_role_policy(RoleName="kfaws-drift", PolicyName="extra", PolicyDocument=json.dumps(EXTRA))
    iam.delete_role_policy(RoleName="kfaws-drift", PolicyName="scoped")
    differences = _drift(cfn)["PropertyDifferences"]
    assert [(d["PropertyPath"], d["DifferenceType"]) for d in differences] == [
        ("/Policies/0", "REMOVE"),
        ("/Policies/1", "ADD"),
    ], differences
    assert json.loads(differences[0]["ExpectedValue"])["PolicyName"] == "scoped"
    assert json.loads(differences[1]["ActualValue"])["PolicyName"] == "extra"


def test_a_deleted_role_is_deleted_and_other_types_are_not_checked(aws):
    cfn, iam = aws("cloudformation"), aws("iam")
    _stack(cfn)
    iam.delete_role_policy(RoleName="kfaws-drift", PolicyName="scoped")
    iam.delete_role(RoleName="kfaws-drift")
    drift = _drift(cfn)
    assert drift["StackResourceDriftStatus"] == "DELETED"
    assert "ActualProperties" not in drift
    assert json.loads(drift["ExpectedProperties"])["RoleName"] == "kfaws-drift"
    assert _drift(cfn, "Queue")["StackResourceDriftStatus"] == "NOT_CHECKED"
