"""A resource that fails to create fails the stack, with a per-resource event, instead of hanging.

AWS: "If stack creation fails, CloudFormation rolls back the stack by default"
(OnFailure ROLLBACK -> ROLLBACK_COMPLETE; DO_NOTHING -> CREATE_FAILED; DELETE),
and the failing resource gets a CREATE_FAILED event with ResourceStatusReason.
A failed update rolls back "to the last known stable state": the stack
describes its previous template, parameters and outputs.
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateStack.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/stack-failure-options.html
"""

import json

import pytest
from conftest import wait_for

TERMINAL = {"CREATE_COMPLETE", "CREATE_FAILED", "ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "DELETE_COMPLETE"}

# The subnet's CIDR lies outside the VPC's: EC2 refuses it (InvalidSubnet.Range).
BAD_SUBNET = json.dumps(
    {
        "Resources": {
            "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.20.0.0/16"}},
            "Subnet": {
                "Type": "AWS::EC2::Subnet",
                "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "192.168.0.0/24"},
            },
        }
    }
)


def _final_status(cfn, stack_id):
    def status():
        s = cfn.describe_stacks(StackName=stack_id)["Stacks"][0]["StackStatus"]
        return s if s in TERMINAL else None

    return wait_for(status)


def _vpcs(ec2):
    return ec2.describe_vpcs(Filters=[{"Name": "cidr", "Values": ["10.20.0.0/16"]}])["Vpcs"]


def _failed_event(cfn, stack_id):
    events = cfn.describe_stack_events(StackName=stack_id)["StackEvents"]
    return [e for e in events if e["ResourceStatus"] == "CREATE_FAILED" and e["LogicalResourceId"] != e["StackName"]]


def test_failing_resource_rolls_the_stack_back(aws):
    cfn, ec2 = aws("cloudformation"), aws("ec2")
    stack_id = cfn.create_stack(StackName="bad", TemplateBody=BAD_SUBNET)["StackId"]

    assert _final_status(cfn, stack_id) == "ROLLBACK_COMPLETE"
    failed = _failed_event(cfn, stack_id)
    assert [e["LogicalResourceId"] for e in failed] == ["Subnet"]
    assert failed[0]["ResourceType"] == "AWS::EC2::Subnet"
    assert failed[0]["ResourceStatusReason"]
    assert _vpcs(ec2) == [], "rollback deletes the resources that were created"


def test_on_failure_do_nothing_keeps_the_created_resources(aws):
    cfn, ec2 = aws("cloudformation"), aws("ec2")
    stack_id = cfn.create_stack(StackName="bad", TemplateBody=BAD_SUBNET, OnFailure="DO_NOTHING")["StackId"]

    assert _final_status(cfn, stack_id) == "CREATE_FAILED"
    assert len(_failed_event(cfn, stack_id)) == 1
    assert len(_vpcs(ec2)) == 1


def test_on_failure_delete_deletes_the_stack(aws):
    cfn, ec2 = aws("cloudformation"), aws("ec2")
    stack_id = cfn.create_stack(StackName="bad", TemplateBody=BAD_SUBNET, OnFailure="DELETE")["StackId"]

    assert _final_status(cfn, stack_id) == "DELETE_COMPLETE"
    assert _vpcs(ec2) == []


def test_failing_change_set_rolls_the_new_stack_back(aws):
    cfn = aws("cloudformation")
    change_set = cfn.create_change_set(
        StackName="bad", ChangeSetName="plan", TemplateBody=BAD_SUBNET, ChangeSetType="CREATE"
    )
    wait_for(
        lambda: cfn.describe_change_set(ChangeSetName=change_set["Id"])["Status"] == "CREATE_COMPLETE"
    )
    cfn.execute_change_set(ChangeSetName=change_set["Id"])

    assert _final_status(cfn, change_set["StackId"]) == "ROLLBACK_COMPLETE"
    assert [e["LogicalResourceId"] for e in _failed_event(cfn, change_set["StackId"])] == ["Subnet"]


def test_a_failed_stack_can_be_deleted(aws):
    cfn = aws("cloudformation")
    stack_id = cfn.create_stack(StackName="bad", TemplateBody=BAD_SUBNET)["StackId"]
    _final_status(cfn, stack_id)
    cfn.delete_stack(StackName=stack_id)

    assert _final_status(cfn, stack_id) == "DELETE_COMPLETE"
    with pytest.raises(cfn.exceptions.ClientError):
        cfn.describe_stacks(StackName="bad")


# A subnet whose CIDR is a parameter.
SUBNET_PARAMETER = json.dumps(
    {
        "Parameters": {"SubnetCidr": {"Type": "String"}},
        "Resources": {
            "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.20.0.0/16"}},
            "Subnet": {
                "Type": "AWS::EC2::Subnet",
                "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": {"Ref": "SubnetCidr"}},
            },
        },
        "Outputs": {"Cidr": {"Value": {"Ref": "SubnetCidr"}}},
    }
)

# The same plus a subnet outside the VPC's range, which EC2 refuses: the update fails.
FAILING_UPDATE = json.dumps(
    {
        **json.loads(SUBNET_PARAMETER),
        "Description": "second",
        "Resources": {
            **json.loads(SUBNET_PARAMETER)["Resources"],
            "Outside": {
                "Type": "AWS::EC2::Subnet",
                "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "192.168.0.0/24"},
            },
        },
    }
)


def _described(cfn, stack_id):
    stack = cfn.describe_stacks(StackName=stack_id)["Stacks"][0]
    parameters = {p["ParameterKey"]: p["ParameterValue"] for p in stack.get("Parameters", [])}
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    return parameters, outputs


def _update_with_change_set(cfn, name, body, parameters):
    cfn.create_change_set(
        StackName=name, ChangeSetName="bad", TemplateBody=body, Parameters=parameters, ChangeSetType="UPDATE"
    )
    wait_for(lambda: cfn.describe_change_set(StackName=name, ChangeSetName="bad")["Status"] == "CREATE_COMPLETE")
    cfn.execute_change_set(StackName=name, ChangeSetName="bad")


def _update_stack(cfn, name, body, parameters):
    cfn.update_stack(StackName=name, TemplateBody=body, Parameters=parameters)


@pytest.mark.parametrize("update", [_update_stack, _update_with_change_set])
def test_a_failed_update_describes_the_previous_template_parameters_and_outputs(aws, update):
    cfn = aws("cloudformation")
    first = [{"ParameterKey": "SubnetCidr", "ParameterValue": "10.20.1.0/24"}]
    stack_id = cfn.create_stack(StackName="net", TemplateBody=SUBNET_PARAMETER, Parameters=first)["StackId"]
    assert _final_status(cfn, stack_id) == "CREATE_COMPLETE"
    before = _described(cfn, stack_id)
    assert before == ({"SubnetCidr": "10.20.1.0/24"}, {"Cidr": "10.20.1.0/24"})

    second = [{"ParameterKey": "SubnetCidr", "ParameterValue": "10.20.2.0/24"}]
    update(cfn, "net", FAILING_UPDATE, second)

    def settled():
        s = cfn.describe_stacks(StackName=stack_id)["Stacks"][0]["StackStatus"]
        return s if s in ("UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "UPDATE_ROLLBACK_FAILED") else None

    assert wait_for(settled) == "UPDATE_ROLLBACK_COMPLETE"
    assert _described(cfn, stack_id) == before
    body = cfn.get_template(StackName=stack_id)["TemplateBody"]
    assert (body if isinstance(body, dict) else json.loads(body)) == json.loads(SUBNET_PARAMETER)


def test_a_rolled_back_stack_lists_its_resources_without_making_them(aws):
    # The bucket's name is taken, so the stack's create fails and rolls back; listing the
    # stack must not try to make the bucket again.
    cfn, s3 = aws("cloudformation"), aws("s3")
    s3.create_bucket(Bucket="taken-by-someone")
    template = {"Resources": {"Bucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "taken-by-someone"}}}}
    stack_id = cfn.create_stack(StackName="taken", TemplateBody=json.dumps(template))["StackId"]
    wait_for(lambda: cfn.describe_stacks(StackName=stack_id)["Stacks"][0]["StackStatus"] == "ROLLBACK_COMPLETE")
    listed = cfn.list_stack_resources(StackName=stack_id)["StackResourceSummaries"]
    assert [r for r in listed if r["ResourceStatus"] != "DELETE_COMPLETE"] == []
    described = cfn.describe_stack_resources(StackName=stack_id)["StackResources"]
    assert [r for r in described if r["ResourceStatus"] != "DELETE_COMPLETE"] == []
