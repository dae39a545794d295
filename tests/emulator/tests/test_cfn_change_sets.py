"""Change sets see parameter changes; executing one updates the stack's parameters and outputs.

https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-changesets.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ExecuteChangeSet.html
"""

import json
import time

TEMPLATE = json.dumps(
    {
        "Parameters": {"Name": {"Type": "String"}, "Mode": {"Type": "String"}},
        "Conditions": {"Big": {"Fn::Equals": [{"Ref": "Mode"}, "big"]}},
        "Resources": {
            "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": {"Fn::Sub": "${Name}-q"}}},
            "Topic": {
                "Type": "AWS::SNS::Topic",
                "Properties": {"TopicName": {"Fn::If": ["Big", "big-topic", "small-topic"]}},
            },
            "Other": {"Type": "AWS::SNS::Topic", "Properties": {"TopicName": "unrelated"}},
        },
        "Outputs": {"QueueName": {"Value": {"Fn::Sub": "${Name}-q"}}},
    }
)


def _params(name, mode):
    return [{"ParameterKey": "Name", "ParameterValue": name}, {"ParameterKey": "Mode", "ParameterValue": mode}]


def _wait(cfn, stack, prefix):
    for _ in range(100):
        status = cfn.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"]
        if status.startswith(prefix) and not status.endswith("IN_PROGRESS"):
            return status
        time.sleep(0.1)
    raise AssertionError(f"{stack} stuck in {status}")


def test_a_parameter_only_change_set_lists_the_resources_using_the_parameters(aws):
    cfn = aws("cloudformation")
    cfn.create_stack(StackName="cs", TemplateBody=TEMPLATE, Parameters=_params("one", "small"))
    _wait(cfn, "cs", "CREATE")
    cfn.create_change_set(
        StackName="cs", ChangeSetName="p", TemplateBody=TEMPLATE, Parameters=_params("two", "big"), ChangeSetType="UPDATE"
    )
    changes = cfn.describe_change_set(StackName="cs", ChangeSetName="p")["Changes"]
    modified = sorted(c["ResourceChange"]["LogicalResourceId"] for c in changes if c["ResourceChange"]["Action"] == "Modify")
    assert modified == ["Queue", "Topic"]


def test_executing_a_change_set_updates_the_stacks_parameters_and_outputs(aws):
    cfn = aws("cloudformation")
    cfn.create_stack(StackName="ex", TemplateBody=TEMPLATE, Parameters=_params("one", "small"))
    _wait(cfn, "ex", "CREATE")
    cfn.create_change_set(
        StackName="ex", ChangeSetName="p", TemplateBody=TEMPLATE, Parameters=_params("two", "small"), ChangeSetType="UPDATE"
    )
    cfn.execute_change_set(StackName="ex", ChangeSetName="p")
    assert _wait(cfn, "ex", "UPDATE") == "UPDATE_COMPLETE"
    stack = cfn.describe_stacks(StackName="ex")["Stacks"][0]
    assert {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}["Name"] == "two"
    assert {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}["QueueName"] == "two-q"
