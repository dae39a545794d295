"""A CommaDelimitedList parameter: the template sees the list, DescribeStacks the text as given.

https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_Parameter.html
"""

import json

from conftest import wait_for
from templates import ASSUME_EKS

POLICIES = [
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
]


def test_a_list_parameter_reads_back_as_given_and_reaches_the_resource(aws):
    cfn, iam = aws("cloudformation"), aws("iam")
    template = {
        "Parameters": {"Policies": {"Type": "CommaDelimitedList"}},
        "Resources": {
            "Role": {
                "Type": "AWS::IAM::Role",
                "Properties": {
                    "RoleName": "kfaws-list",
                    "AssumeRolePolicyDocument": ASSUME_EKS,
                    "ManagedPolicyArns": {"Ref": "Policies"},
                },
            }
        },
    }
    cfn.create_stack(
        StackName="list",
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": "Policies", "ParameterValue": ",".join(POLICIES)}],
        Capabilities=["CAPABILITY_NAMED_IAM"],
    )
    wait_for(lambda: cfn.describe_stacks(StackName="list")["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE")
    parameters = cfn.describe_stacks(StackName="list")["Stacks"][0]["Parameters"]
    assert parameters == [{"ParameterKey": "Policies", "ParameterValue": ",".join(POLICIES)}]
    attached = iam.list_attached_role_policies(RoleName="kfaws-list")["AttachedPolicies"]
    assert sorted(p["PolicyArn"] for p in attached) == POLICIES
