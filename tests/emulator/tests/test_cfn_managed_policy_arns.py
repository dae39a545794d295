"""AWS::IAM::Role ManagedPolicyArns: the policies are attached, and detached when the stack goes.

https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-iam-role.html#cfn-iam-role-managedpolicyarns
"""

import json

import pytest
from conftest import wait_for
from templates import ASSUME_EKS

POLICIES = [
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
]


def _template(policies):
    return json.dumps(
        {
            "Resources": {
                "NodeRole": {
                    "Type": "AWS::IAM::Role",
                    "Properties": {
                        "RoleName": "kfaws-node",
                        "AssumeRolePolicyDocument": ASSUME_EKS,
                        "ManagedPolicyArns": policies,
                    },
                }
            }
        }
    )


def _status(cfn, name):
    return cfn.describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]


def test_managed_policies_are_attached_and_detached_with_the_stack(aws):
    cfn, iam = aws("cloudformation"), aws("iam")
    cfn.create_stack(StackName="iam", TemplateBody=_template(POLICIES), Capabilities=["CAPABILITY_NAMED_IAM"])
    wait_for(lambda: _status(cfn, "iam") == "CREATE_COMPLETE")

    attached = iam.list_attached_role_policies(RoleName="kfaws-node")["AttachedPolicies"]
    assert sorted(p["PolicyArn"] for p in attached) == sorted(POLICIES)

    stack_id = cfn.describe_stacks(StackName="iam")["Stacks"][0]["StackId"]
    cfn.delete_stack(StackName="iam")
    wait_for(lambda: _status(cfn, stack_id) in ("DELETE_COMPLETE", "DELETE_FAILED"))
    assert _status(cfn, stack_id) == "DELETE_COMPLETE"
    with pytest.raises(iam.exceptions.NoSuchEntityException):
        iam.get_role(RoleName="kfaws-node")


def test_a_policy_that_does_not_exist_fails_the_role(aws):
    cfn, iam = aws("cloudformation"), aws("iam")
    missing = "arn:aws:iam::aws:policy/NoSuchPolicyAnywhere"
    cfn.create_stack(StackName="iam", TemplateBody=_template([missing]), Capabilities=["CAPABILITY_NAMED_IAM"])
    final = wait_for(lambda: _status(cfn, "iam") in ("ROLLBACK_COMPLETE", "CREATE_COMPLETE") and _status(cfn, "iam"))

    assert final == "ROLLBACK_COMPLETE"
    failed = [
        e
        for e in cfn.describe_stack_events(StackName="iam")["StackEvents"]
        if e["ResourceStatus"] == "CREATE_FAILED"
    ]
    assert failed[0]["LogicalResourceId"] == "NodeRole"
    assert "NoSuchPolicyAnywhere" in failed[0]["ResourceStatusReason"]
    with pytest.raises(iam.exceptions.NoSuchEntityException):
        iam.get_role(RoleName="kfaws-node")


def _with_inline(names):
    template = json.loads(_template(POLICIES))
    template["Resources"]["NodeRole"]["Properties"]["Policies"] = [
        {
            "PolicyName": name,
            "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{name}/*"}],
            },
        }
        for name in names
    ]
    return json.dumps(template)


def test_an_update_puts_the_new_inline_policies_and_deletes_the_old_ones_only(aws):
    cfn, iam = aws("cloudformation"), aws("iam")
    cfn.create_stack(StackName="iam", TemplateBody=_with_inline(["a"]), Capabilities=["CAPABILITY_NAMED_IAM"])
    wait_for(lambda: _status(cfn, "iam") == "CREATE_COMPLETE")
    # Added outside CloudFormation: an update leaves it.
    mine = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "*"}]}
    iam.put_role_policy(RoleName="kfaws-node", PolicyName="mine", PolicyDocument=json.dumps(mine))

    cfn.update_stack(StackName="iam", TemplateBody=_with_inline(["b"]), Capabilities=["CAPABILITY_NAMED_IAM"])
    wait_for(lambda: _status(cfn, "iam") == "UPDATE_COMPLETE")
    assert sorted(iam.list_role_policies(RoleName="kfaws-node")["PolicyNames"]) == ["b", "mine"]
    document = iam.get_role_policy(RoleName="kfaws-node", PolicyName="b")["PolicyDocument"]
    assert document["Statement"][0]["Resource"] == "arn:aws:s3:::b/*"

    cfn.update_stack(StackName="iam", TemplateBody=_template(POLICIES), Capabilities=["CAPABILITY_NAMED_IAM"])
    wait_for(lambda: _status(cfn, "iam") == "UPDATE_COMPLETE")
    assert iam.list_role_policies(RoleName="kfaws-node")["PolicyNames"] == ["mine"]


# As kfaws' stacks/iam.yaml: a role that attaches the policies of a CommaDelimitedList
# parameter, one that attaches an existing policy, and outputs that read both roles.
STACK_IAM = json.dumps(
    {
        "Parameters": {"NodeRolePolicies": {"Type": "CommaDelimitedList"}},
        "Resources": {
            "ClusterRole": {
                "Type": "AWS::IAM::Role",
                "Properties": {
                    "RoleName": "kfaws-cluster",
                    "AssumeRolePolicyDocument": ASSUME_EKS,
                    "ManagedPolicyArns": ["arn:aws:iam::aws:policy/AmazonEKSClusterPolicy"],
                },
            },
            "NodeRole": {
                "Type": "AWS::IAM::Role",
                "DependsOn": "ClusterRole",
                "Properties": {
                    "RoleName": "kfaws-node",
                    "AssumeRolePolicyDocument": ASSUME_EKS,
                    "ManagedPolicyArns": {"Ref": "NodeRolePolicies"},
                },
            },
        },
        "Outputs": {
            "ClusterRoleArn": {"Value": {"Fn::GetAtt": ["ClusterRole", "Arn"]}},
            "NodeRoleArn": {"Value": {"Fn::GetAtt": ["NodeRole", "Arn"]}},
        },
    }
)
TYPO = "arn:aws:iam::aws:policy/NoSuchPolicyXYZ"


@pytest.mark.parametrize(
    ("on_failure", "final"), [("ROLLBACK", "ROLLBACK_COMPLETE"), ("DO_NOTHING", "CREATE_FAILED")]
)
def test_a_create_with_a_policy_that_does_not_exist_fails_and_the_stack_still_answers(
    aws, lifecycle, on_failure, final
):
    """CloudFormation: the role is CREATE_FAILED with IAM's reason, the stack fails (no outputs:
    they exist only once a create completes), and DescribeStacks and DeleteStack keep working.

    moto resolved the outputs of the failed stack on each DescribeStacks, which created its
    rolled-back roles again and failed the call (HTTP 500) on the missing policy.
    """
    cfn, iam = aws("cloudformation"), aws("iam")
    lifecycle({"cloudformation.stack.create": 0.3, "cloudformation.stack.delete": 0.1})
    stack_id = cfn.create_stack(
        StackName="iam",
        TemplateBody=STACK_IAM,
        Parameters=[
            {
                "ParameterKey": "NodeRolePolicies",
                "ParameterValue": f"arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy,{TYPO}",
            }
        ],
        Capabilities=["CAPABILITY_NAMED_IAM"],
        OnFailure=on_failure,
    )["StackId"]

    # Answers while in progress too, and again and again once it has failed.
    assert _status(cfn, stack_id) == "CREATE_IN_PROGRESS"
    assert wait_for(lambda: _status(cfn, stack_id) == final)
    for _ in range(3):
        stack = cfn.describe_stacks(StackName="iam")["Stacks"][0]
        assert stack["StackStatus"] == final
        assert "Outputs" not in stack
    failed = [
        e
        for e in cfn.describe_stack_events(StackName="iam")["StackEvents"]
        if e["ResourceStatus"] == "CREATE_FAILED" and e["LogicalResourceId"] != "iam"
    ]
    assert [e["LogicalResourceId"] for e in failed] == ["NodeRole"]
    assert failed[0]["ResourceType"] == "AWS::IAM::Role"
    assert f"Policy {TYPO} does not exist or is not attachable." in failed[0]["ResourceStatusReason"]
    with pytest.raises(iam.exceptions.NoSuchEntityException):
        iam.get_role(RoleName="kfaws-node")
    if on_failure == "ROLLBACK":
        with pytest.raises(iam.exceptions.NoSuchEntityException):
            iam.get_role(RoleName="kfaws-cluster")

    cfn.delete_stack(StackName=stack_id)
    assert wait_for(lambda: _status(cfn, stack_id) == "DELETE_COMPLETE")
    with pytest.raises(iam.exceptions.NoSuchEntityException):
        iam.get_role(RoleName="kfaws-cluster")
