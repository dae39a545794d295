"""A change set says whether a modified resource is replaced (``Replacement``).

AWS: a Modify that changes a property marked "Update requires: Replacement"
(an IAM role's ``RoleName``) has ``Replacement: True``; one that changes only
properties updated in place (the role's ``Description``) has ``False``.
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ResourceChange.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-iam-role.html
"""

import json

from conftest import wait_for

ASSUME = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "eks.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}

TEMPLATE = json.dumps(
    {
        "Parameters": {"Name": {"Type": "String"}, "About": {"Type": "String"}},
        "Resources": {
            "Role": {
                "Type": "AWS::IAM::Role",
                "Properties": {
                    "RoleName": {"Ref": "Name"},
                    "Description": {"Fn::Sub": "role for ${About}"},
                    "AssumeRolePolicyDocument": ASSUME,
                },
            }
        },
    }
)


def _params(name, about):
    return [
        {"ParameterKey": "Name", "ParameterValue": name},
        {"ParameterKey": "About", "ParameterValue": about},
    ]


def _changes(cfn, name, about):
    cfn.create_change_set(
        StackName="roles",
        ChangeSetName=f"to-{name}-{about}",
        TemplateBody=TEMPLATE,
        Parameters=_params(name, about),
        Capabilities=["CAPABILITY_NAMED_IAM"],
        ChangeSetType="UPDATE",
    )
    done = wait_for(
        lambda: (cs := cfn.describe_change_set(StackName="roles", ChangeSetName=f"to-{name}-{about}"))["Status"]
        in ("CREATE_COMPLETE", "FAILED")
        and cs
    )
    return {c["ResourceChange"]["LogicalResourceId"]: c["ResourceChange"] for c in done["Changes"]}


def test_a_renamed_role_is_replaced_and_a_new_description_is_not(aws):
    cfn = aws("cloudformation")
    cfn.create_stack(
        StackName="roles", TemplateBody=TEMPLATE, Parameters=_params("first", "a"), Capabilities=["CAPABILITY_NAMED_IAM"]
    )
    wait_for(lambda: cfn.describe_stacks(StackName="roles")["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE")

    renamed = _changes(cfn, "second", "a")["Role"]
    assert (renamed["Action"], renamed["Replacement"]) == ("Modify", "True")
    assert renamed["Scope"] == ["Properties"]

    described = _changes(cfn, "first", "b")["Role"]
    assert (described["Action"], described["Replacement"]) == ("Modify", "False")
