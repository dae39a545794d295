"""A failed update whose rollback fails ends UPDATE_ROLLBACK_FAILED; ContinueUpdateRollback resumes it.

AWS: a resource that cannot be rolled back gets an UPDATE_FAILED event and the
stack ends UPDATE_ROLLBACK_FAILED ("The following resource(s) failed to
update: [X]. "); such a stack "is in UPDATE_ROLLBACK_FAILED state and can not
be updated", but can be deleted; ContinueUpdateRollback retries the rollback,
skipping the failed resources named in ResourcesToSkip ("Resource skipped
during UpdateRollback"), and ends UPDATE_ROLLBACK_COMPLETE.
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ContinueUpdateRollback.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-continueupdaterollback.html

The emulator fails a rollback when a rule of POST /_kfaws/cfn/rollback-failures
names the stack (patch cfn_update_rollback_failed).
"""

import json

import pytest
from conftest import wait_for

REASON = "Subnet subnet-1 is in use and cannot be rolled back"

FIRST = json.dumps(
    {
        "Resources": {
            "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.30.0.0/16"}},
            "Subnet": {
                "Type": "AWS::EC2::Subnet",
                "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.30.1.0/24"},
            },
        },
        "Outputs": {"VpcId": {"Value": {"Ref": "Vpc"}}},
    }
)

# The same plus a subnet outside the VPC's range, which EC2 refuses: the update fails.
FAILING = json.dumps(
    {
        **json.loads(FIRST),
        "Description": "failing",
        "Resources": {
            **json.loads(FIRST)["Resources"],
            "Outside": {
                "Type": "AWS::EC2::Subnet",
                "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "192.168.0.0/24"},
            },
        },
    }
)

# A good update: one more subnet inside the VPC.
GOOD = json.dumps(
    {
        **json.loads(FIRST),
        "Resources": {
            **json.loads(FIRST)["Resources"],
            "Second": {
                "Type": "AWS::EC2::Subnet",
                "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.30.2.0/24"},
            },
        },
    }
)

SETTLED = {"UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "UPDATE_ROLLBACK_FAILED"}


@pytest.fixture
def rollback_failure(control, account_id):
    """``rollback_failure(count=1)`` arms a rule failing the rollbacks of stack ``net`` on ``Subnet``."""

    def arm(count=1, logical_id="Subnet"):
        status, body = control.call(
            "POST",
            "/cfn/rollback-failures",
            {"stack_name": "net", "logical_id": logical_id, "reason": REASON, "count": count, "account_id": account_id},
        )
        assert status == 201, body
        return body

    yield arm
    control.call("DELETE", f"/cfn/rollback-failures?account_id={account_id}")


def _rule(control, rule_id):
    status, rules = control.call("GET", "/cfn/rollback-failures")
    assert status == 200
    return next(r for r in rules if r["id"] == rule_id)


def _status(cfn, stack_id):
    return cfn.describe_stacks(StackName=stack_id)["Stacks"][0]["StackStatus"]


def _settled(cfn, stack_id):
    return wait_for(lambda: (s := _status(cfn, stack_id)) in SETTLED and s)


def _events(cfn, stack_id):
    """(logical id, status, reason) of every event, oldest first."""
    events = cfn.describe_stack_events(StackName=stack_id)["StackEvents"][::-1]
    return [(e["LogicalResourceId"], e["ResourceStatus"], e.get("ResourceStatusReason")) for e in events]


def _create(cfn):
    stack_id = cfn.create_stack(StackName="net", TemplateBody=FIRST)["StackId"]
    wait_for(lambda: _status(cfn, stack_id) == "CREATE_COMPLETE")
    return stack_id


def _update_stack(cfn):
    cfn.update_stack(StackName="net", TemplateBody=FAILING)


def _update_with_change_set(cfn):
    cfn.create_change_set(StackName="net", ChangeSetName="failing", TemplateBody=FAILING, ChangeSetType="UPDATE")
    wait_for(lambda: cfn.describe_change_set(StackName="net", ChangeSetName="failing")["Status"] == "CREATE_COMPLETE")
    cfn.execute_change_set(StackName="net", ChangeSetName="failing")


def _fail_rollback(cfn, update=_update_stack):
    """Creates stack ``net``, then fails an update of it; answers its id and its event count before the update."""
    stack_id = _create(cfn)
    before = len(_events(cfn, stack_id))
    update(cfn)
    assert _settled(cfn, stack_id) == "UPDATE_ROLLBACK_FAILED"
    return stack_id, before


def _refusal(stack_id):
    return f"Stack:{stack_id} is in UPDATE_ROLLBACK_FAILED state and can not be updated."


@pytest.mark.parametrize("update", [_update_stack, _update_with_change_set])
def test_failed_update_with_a_failing_rollback_ends_update_rollback_failed(aws, control, rollback_failure, update):
    cfn = aws("cloudformation")
    rule = rollback_failure(count=1)
    stack_id = _create(cfn)
    outputs = cfn.describe_stacks(StackName=stack_id)["Stacks"][0]["Outputs"]
    before = len(_events(cfn, stack_id))

    update(cfn)

    assert _settled(cfn, stack_id) == "UPDATE_ROLLBACK_FAILED"
    events = _events(cfn, stack_id)[before:]
    assert events[0][:2] == ("net", "UPDATE_IN_PROGRESS")
    assert events[1][:2] == ("Outside", "UPDATE_FAILED")
    assert events[2] == ("net", "UPDATE_ROLLBACK_IN_PROGRESS", "The following resource(s) failed to update: [Outside]. ")
    assert events[3] == ("Subnet", "UPDATE_FAILED", REASON)
    assert events[4] == ("net", "UPDATE_ROLLBACK_FAILED", "The following resource(s) failed to update: [Subnet]. ")
    assert len(events) == 5
    failed = cfn.describe_stack_events(StackName=stack_id)["StackEvents"][1]
    assert failed["ResourceType"] == "AWS::EC2::Subnet" and failed["PhysicalResourceId"].startswith("subnet-")
    # The stack describes its previous template and outputs, as after any failed update.
    stack = cfn.describe_stacks(StackName=stack_id)["Stacks"][0]
    assert stack["Outputs"] == outputs and "Description" not in stack
    assert (rule := _rule(control, rule["id"]))["count"] == 0 and rule["fired"] == 1


def test_only_a_rule_of_the_stack_and_its_account_fails_the_rollback(aws, control, account_id):
    cfn = aws("cloudformation")
    name = f"net-{account_id}"  # a rule naming no account matches every account: keep it to this test
    other_account = "5" + account_id[1:]
    rules = [
        {"stack_name": "other", "logical_id": "Subnet", "account_id": account_id},
        {"stack_name": name, "logical_id": "Subnet", "account_id": other_account},
    ]
    try:
        for rule in rules:
            assert control.call("POST", "/cfn/rollback-failures", rule)[0] == 201
        stack_id = cfn.create_stack(StackName=name, TemplateBody=FIRST)["StackId"]
        wait_for(lambda: _status(cfn, stack_id) == "CREATE_COMPLETE")
        cfn.update_stack(StackName=name, TemplateBody=FAILING)
        assert _settled(cfn, stack_id) == "UPDATE_ROLLBACK_COMPLETE"

        status, armed = control.call("POST", "/cfn/rollback-failures", {"stack_name": name, "logical_id": "Vpc"})
        assert status == 201 and armed["account_id"] is None
        cfn.update_stack(StackName=name, TemplateBody=FAILING)
        assert _settled(cfn, stack_id) == "UPDATE_ROLLBACK_FAILED"
        assert _events(cfn, stack_id)[-2] == ("Vpc", "UPDATE_FAILED", armed["reason"])
        assert _rule(control, armed["id"])["fired"] == 1
    finally:
        control.call("DELETE", f"/cfn/rollback-failures?account_id={account_id}")
        control.call("DELETE", f"/cfn/rollback-failures?account_id={other_account}")


def test_update_rollback_failed_stack_refuses_updates_and_change_sets(aws, rollback_failure):
    cfn = aws("cloudformation")
    rollback_failure(count=1)
    stack_id = _create(cfn)
    # A change set made before the rollback failed cannot be executed after it.
    cfn.create_change_set(StackName="net", ChangeSetName="later", TemplateBody=GOOD, ChangeSetType="UPDATE")
    _update_stack(cfn)
    assert _settled(cfn, stack_id) == "UPDATE_ROLLBACK_FAILED"
    events = len(_events(cfn, stack_id))

    with pytest.raises(cfn.exceptions.ClientError) as update:
        cfn.update_stack(StackName="net", TemplateBody=GOOD)
    with pytest.raises(cfn.exceptions.ClientError) as create:
        cfn.create_change_set(StackName=stack_id, ChangeSetName="again", TemplateBody=GOOD, ChangeSetType="UPDATE")
    with pytest.raises(cfn.exceptions.ClientError) as execute:
        cfn.execute_change_set(StackName="net", ChangeSetName="later")

    for refused in (update, create, execute):
        assert refused.value.response["Error"]["Code"] == "ValidationError"
        assert refused.value.response["Error"]["Message"] == _refusal(stack_id)
    assert _status(cfn, stack_id) == "UPDATE_ROLLBACK_FAILED"
    assert len(_events(cfn, stack_id)) == events


def test_continue_update_rollback_completes_once_the_rule_is_spent(aws, control, account_id, rollback_failure):
    cfn, ec2 = aws("cloudformation"), aws("ec2")
    rollback_failure(count=1)
    stack_id, _ = _fail_rollback(cfn)
    before = len(_events(cfn, stack_id))

    cfn.continue_update_rollback(StackName="net")

    assert _settled(cfn, stack_id) == "UPDATE_ROLLBACK_COMPLETE"
    events = _events(cfn, stack_id)[before:]
    assert [e[:2] for e in events] == [("net", "UPDATE_ROLLBACK_IN_PROGRESS"), ("net", "UPDATE_ROLLBACK_COMPLETE")]
    # Updatable again.
    cfn.update_stack(StackName="net", TemplateBody=GOOD)
    assert _settled(cfn, stack_id) == "UPDATE_COMPLETE"
    assert len(ec2.describe_subnets(Filters=[{"Name": "cidr-block", "Values": ["10.30.2.0/24"]}])["Subnets"]) == 1
    # The call log and the fault rules name the operation.
    calls = control.call("GET", f"/calls?account_id={account_id}")[1]
    assert any(c["service"] == "cloudformation" and c["operation"] == "ContinueUpdateRollback" for c in calls)


def test_continue_update_rollback_fails_again_while_the_rule_is_armed_unless_skipped(aws, control, rollback_failure):
    cfn = aws("cloudformation")
    rule = rollback_failure(count=None)
    stack_id, _ = _fail_rollback(cfn)

    before = len(_events(cfn, stack_id))
    cfn.continue_update_rollback(StackName=stack_id)
    assert _settled(cfn, stack_id) == "UPDATE_ROLLBACK_FAILED"
    assert _events(cfn, stack_id)[before:] == [
        ("net", "UPDATE_ROLLBACK_IN_PROGRESS", "Continue rollback requested by user."),
        ("Subnet", "UPDATE_FAILED", REASON),
        ("net", "UPDATE_ROLLBACK_FAILED", "The following resource(s) failed to update: [Subnet]. "),
    ]
    assert _rule(control, rule["id"])["fired"] == 2

    before = len(_events(cfn, stack_id))
    cfn.continue_update_rollback(StackName="net", ResourcesToSkip=["Subnet"])
    assert _settled(cfn, stack_id) == "UPDATE_ROLLBACK_COMPLETE"
    assert _events(cfn, stack_id)[before:] == [
        ("net", "UPDATE_ROLLBACK_IN_PROGRESS", "Continue rollback requested by user."),
        ("Subnet", "UPDATE_COMPLETE", "Resource skipped during UpdateRollback"),
        ("net", "UPDATE_ROLLBACK_COMPLETE", None),
    ]
    assert _rule(control, rule["id"])["fired"] == 2, "a skipped resource does not fail the rollback"


def test_continue_update_rollback_resent_with_its_token_is_the_same_request(aws, control, rollback_failure):
    cfn = aws("cloudformation")
    rule = rollback_failure(count=2)
    stack_id, _ = _fail_rollback(cfn)
    cfn.continue_update_rollback(StackName="net", ClientRequestToken="continue-1")
    assert _settled(cfn, stack_id) == "UPDATE_ROLLBACK_FAILED"
    events = len(_events(cfn, stack_id))

    cfn.continue_update_rollback(StackName="net", ClientRequestToken="continue-1")

    assert _status(cfn, stack_id) == "UPDATE_ROLLBACK_FAILED"
    assert len(_events(cfn, stack_id)) == events
    assert _rule(control, rule["id"])["fired"] == 2
    cfn.continue_update_rollback(StackName="net", ClientRequestToken="continue-2")
    assert _settled(cfn, stack_id) == "UPDATE_ROLLBACK_COMPLETE"


def test_continue_update_rollback_is_refused_outside_update_rollback_failed(aws):
    cfn = aws("cloudformation")
    stack_id = _create(cfn)

    with pytest.raises(cfn.exceptions.ClientError) as wrong_state:
        cfn.continue_update_rollback(StackName=stack_id)
    with pytest.raises(cfn.exceptions.ClientError) as missing:
        cfn.continue_update_rollback(StackName="nothing")

    assert wrong_state.value.response["Error"]["Code"] == "ValidationError"
    assert wrong_state.value.response["Error"]["Message"] == (
        "Stack net is in CREATE_COMPLETE state and cannot continue update rollback"
    )
    assert missing.value.response["Error"]["Code"] == "ValidationError"
    assert missing.value.response["Error"]["Message"] == "Stack with id nothing does not exist"
    assert _status(cfn, stack_id) == "CREATE_COMPLETE"


@pytest.mark.parametrize("skip", ["Nothing", "Vpc"])
def test_continue_update_rollback_refuses_to_skip_a_resource_that_did_not_fail(aws, rollback_failure, skip):
    cfn = aws("cloudformation")
    rollback_failure(count=1)
    stack_id, _ = _fail_rollback(cfn)
    events = len(_events(cfn, stack_id))

    with pytest.raises(cfn.exceptions.ClientError) as refused:
        cfn.continue_update_rollback(StackName="net", ResourcesToSkip=["Subnet", skip])

    assert refused.value.response["Error"]["Code"] == "ValidationError"
    assert f"ResourcesToSkip: {skip} is not a resource" in refused.value.response["Error"]["Message"]
    assert _status(cfn, stack_id) == "UPDATE_ROLLBACK_FAILED"
    assert len(_events(cfn, stack_id)) == events


def test_update_rollback_failed_stack_can_be_deleted(aws, rollback_failure):
    cfn, ec2 = aws("cloudformation"), aws("ec2")
    rollback_failure(count=None)
    stack_id, _ = _fail_rollback(cfn)

    cfn.delete_stack(StackName="net")

    wait_for(lambda: _status(cfn, stack_id) == "DELETE_COMPLETE")
    assert ec2.describe_vpcs(Filters=[{"Name": "cidr", "Values": ["10.30.0.0/16"]}])["Vpcs"] == []


def test_failed_rollback_and_its_continuation_take_the_update_duration(aws, lifecycle, rollback_failure):
    cfn = aws("cloudformation")
    rollback_failure(count=1)
    stack_id = _create(cfn)
    lifecycle({"cloudformation.stack.update": 1.0})

    _update_stack(cfn)
    assert _status(cfn, stack_id) == "UPDATE_IN_PROGRESS"
    assert wait_for(lambda: (s := _status(cfn, stack_id)) != "UPDATE_IN_PROGRESS" and s) == "UPDATE_ROLLBACK_FAILED"

    cfn.continue_update_rollback(StackName="net")
    assert _status(cfn, stack_id) == "UPDATE_ROLLBACK_IN_PROGRESS"
    assert _events(cfn, stack_id)[-1][:2] == ("net", "UPDATE_ROLLBACK_IN_PROGRESS"), "later events are held back"
    with pytest.raises(cfn.exceptions.ClientError):
        cfn.continue_update_rollback(StackName="net")  # not UPDATE_ROLLBACK_FAILED meanwhile
    assert wait_for(lambda: (s := _status(cfn, stack_id)) != "UPDATE_ROLLBACK_IN_PROGRESS" and s) == (
        "UPDATE_ROLLBACK_COMPLETE"
    )
    assert _events(cfn, stack_id)[-1][:2] == ("net", "UPDATE_ROLLBACK_COMPLETE")


@pytest.mark.parametrize(
    "body, field",
    [
        ({"logical_id": "Subnet"}, "stack_name"),
        ({"stack_name": "net"}, "logical_id"),
        ({"stack_name": "net", "logical_id": ""}, "logical_id"),
        ({"stack_name": "net", "logical_id": "Subnet", "count": 0}, "count"),
        ({"stack_name": "net", "logical_id": "Subnet", "count": True}, "count"),
        ({"stack_name": "net", "logical_id": "Subnet", "count": "1"}, "count"),
        ({"stack_name": "net", "logical_id": "Subnet", "reason": 5}, "reason"),
        ({"stack_name": "net", "logical_id": "Subnet", "account_id": "12"}, "account_id"),
        ({"stack_name": "net", "logical_id": "Subnet", "stack": "net"}, "stack"),
    ],
)
def test_rollback_failure_rules_are_validated(control, body, field):
    status, answer = control.call("POST", "/cfn/rollback-failures", body)
    assert status == 400
    assert field in answer["error"]


def test_rollback_failure_rules_are_listed_and_removed_per_account(control, account_id):
    status, rule = control.call(
        "POST", "/cfn/rollback-failures", {"stack_name": "net", "logical_id": "Subnet", "account_id": account_id}
    )
    assert status == 201
    assert rule == {
        "stack_name": "net",
        "logical_id": "Subnet",
        "reason": "Injected by the kfaws emulator: the resource cannot be rolled back",
        "count": 1,
        "account_id": account_id,
        "id": rule["id"],
        "fired": 0,
    }
    assert rule in control.call("GET", "/cfn/rollback-failures")[1]

    assert control.call("DELETE", f"/cfn/rollback-failures?account_id={account_id}") == (200, {"removed": 1})
    assert rule not in control.call("GET", "/cfn/rollback-failures")[1]
