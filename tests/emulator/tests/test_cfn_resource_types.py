"""Resource types: AWS::S3::BucketPolicy works; a type the emulator lacks fails loudly.

AWS::S3::BucketPolicy applies ``PolicyDocument`` to ``Bucket`` and removes it
with the stack
(https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-s3-bucketpolicy.html).
A type moto cannot create would otherwise be skipped silently and the stack
reported CREATE_COMPLETE without it; the emulator fails that resource
instead, naming the type, so no test passes on a resource that was never made.
"""

import json

import pytest
from botocore.exceptions import ClientError
from conftest import wait_for

TERMINAL = {"CREATE_COMPLETE", "ROLLBACK_COMPLETE", "CREATE_FAILED", "DELETE_COMPLETE"}


def _final(cfn, stack_id):
    return wait_for(
        lambda: (s := cfn.describe_stacks(StackName=stack_id)["Stacks"][0]["StackStatus"]) in TERMINAL and s
    )


def test_bucket_policy_is_applied_and_removed_with_the_stack(aws, account_id):
    cfn, s3 = aws("cloudformation"), aws("s3")
    bucket = f"kfaws-policy-{account_id}"
    deny_http = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ],
    }
    template = {
        "Resources": {
            "Bucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": bucket}},
            "Policy": {
                "Type": "AWS::S3::BucketPolicy",
                "Properties": {"Bucket": {"Ref": "Bucket"}, "PolicyDocument": deny_http},
            },
        }
    }
    stack_id = cfn.create_stack(StackName="storage", TemplateBody=json.dumps(template))["StackId"]
    assert _final(cfn, stack_id) == "CREATE_COMPLETE"
    assert json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"]) == deny_http

    template["Resources"].pop("Policy")
    cfn.update_stack(StackName=stack_id, TemplateBody=json.dumps(template))
    with pytest.raises(ClientError) as err:
        s3.get_bucket_policy(Bucket=bucket)
    assert err.value.response["Error"]["Code"] == "NoSuchBucketPolicy"


def test_a_resource_type_the_emulator_lacks_fails_its_stack(aws):
    cfn = aws("cloudformation")
    template = {
        "Resources": {
            "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.97.0.0/16"}},
            "Acl": {"Type": "AWS::EC2::NetworkAcl", "Properties": {"VpcId": {"Ref": "Vpc"}}},
        }
    }
    stack_id = cfn.create_stack(StackName="acl", TemplateBody=json.dumps(template))["StackId"]

    assert _final(cfn, stack_id) == "ROLLBACK_COMPLETE"
    failed = [
        e for e in cfn.describe_stack_events(StackName=stack_id)["StackEvents"] if e["ResourceStatus"] == "CREATE_FAILED"
    ]
    assert failed[0]["LogicalResourceId"] == "Acl"
    assert "AWS::EC2::NetworkAcl" in failed[0]["ResourceStatusReason"]
    assert "not supported by the kfaws emulator" in failed[0]["ResourceStatusReason"]
