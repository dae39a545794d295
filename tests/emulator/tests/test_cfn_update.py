"""UpdateStack with nothing to change is refused: "No updates are to be performed."

https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_UpdateStack.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/troubleshooting.html
"""

import json

import pytest
from botocore.exceptions import ClientError

TEMPLATE = json.dumps({"Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.90.0.0/16"}}}})


def test_update_without_changes_is_a_validation_error(aws):
    cfn = aws("cloudformation")
    cfn.create_stack(StackName="same", TemplateBody=TEMPLATE)
    with pytest.raises(ClientError) as err:
        cfn.update_stack(StackName="same", TemplateBody=TEMPLATE)

    assert err.value.response["Error"]["Code"] == "ValidationError"
    assert err.value.response["Error"]["Message"] == "No updates are to be performed."
    assert cfn.describe_stacks(StackName="same")["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE"


def test_update_with_changes_proceeds(aws):
    cfn = aws("cloudformation")
    cfn.create_stack(StackName="changed", TemplateBody=TEMPLATE)
    changed = json.loads(TEMPLATE)
    changed["Resources"]["Igw"] = {"Type": "AWS::EC2::InternetGateway"}
    cfn.update_stack(StackName="changed", TemplateBody=json.dumps(changed))

    assert cfn.describe_stacks(StackName="changed")["Stacks"][0]["StackStatus"] == "UPDATE_COMPLETE"
