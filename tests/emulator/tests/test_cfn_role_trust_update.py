"""A stack update that changes a role's ``AssumeRolePolicyDocument`` sets it on the role.

AWS: ``AssumeRolePolicyDocument`` — "Update requires: No interruption".
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-iam-role.html#cfn-iam-role-assumerolepolicydocument
"""

import json
import urllib.parse

from conftest import wait_for


def _template(service):
    return json.dumps(
        {
            "Resources": {
                "Role": {
                    "Type": "AWS::IAM::Role",
                    "Properties": {
                        "RoleName": "trusting",
                        "AssumeRolePolicyDocument": {
                            "Version": "2012-10-17",
                            "Statement": [
                                {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
                            ],
                        },
                    },
                }
            }
        }
    )


def _status(cfn):
    return cfn.describe_stacks(StackName="trust")["Stacks"][0]["StackStatus"]


def _trusted(iam):
    document = iam.get_role(RoleName="trusting")["Role"]["AssumeRolePolicyDocument"]
    if isinstance(document, str):
        document = json.loads(urllib.parse.unquote(document))
    return document["Statement"][0]["Principal"]["Service"]


def test_an_update_sets_the_new_trust_policy(aws):
    cfn, iam = aws("cloudformation"), aws("iam")
    cfn.create_stack(StackName="trust", TemplateBody=_template("eks.amazonaws.com"), Capabilities=["CAPABILITY_NAMED_IAM"])
    wait_for(lambda: _status(cfn) == "CREATE_COMPLETE")
    assert _trusted(iam) == "eks.amazonaws.com"

    cfn.update_stack(
        StackName="trust", TemplateBody=_template("sagemaker.amazonaws.com"), Capabilities=["CAPABILITY_NAMED_IAM"]
    )
    wait_for(lambda: _status(cfn) in ("UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE"))
    assert _status(cfn) == "UPDATE_COMPLETE"
    assert _trusted(iam) == "sagemaker.amazonaws.com"
