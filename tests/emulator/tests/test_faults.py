"""Fault rules set over the control API, rendered in each protocol's real error shape."""

import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError


def _rule(control, **rule):
    status, body = control.call("POST", "/faults", rule)
    assert status == 201, body
    return body


def _error(call, **kwargs):
    with pytest.raises(ClientError) as err:
        call(**kwargs)
    return err.value.response["Error"]["Code"], err.value.response["ResponseMetadata"]["HTTPStatusCode"]


@pytest.mark.parametrize(
    "service, call, code, status",
    [
        ("cloudformation", lambda c: c.list_stacks(), "Throttling", 400),
        ("iam", lambda c: c.list_roles(), "Throttling", 400),
        ("ec2", lambda c: c.describe_vpcs(), "RequestLimitExceeded", 503),
        ("eks", lambda c: c.list_clusters(), "ThrottlingException", 429),
        ("elasticfilesystem", lambda c: c.describe_file_systems(), "ThrottlingException", 429),
        ("s3", lambda c: c.list_buckets(), "SlowDown", 503),
    ],
)
def test_throttling_in_the_protocol_error_shape_for_n_calls(aws, control, account_id, service, call, code, status):
    client = aws("efs" if service == "elasticfilesystem" else service)
    operation = {
        "cloudformation": "ListStacks",
        "iam": "ListRoles",
        "ec2": "DescribeVpcs",
        "eks": "ListClusters",
        "elasticfilesystem": "DescribeFileSystems",
        "s3": "ListBuckets",
    }[service]
    _rule(control, service=service, operation=operation, kind="throttle", count=2, account_id=account_id)

    assert _error(lambda: call(client)) == (code, status)
    assert _error(lambda: call(client)) == (code, status)
    call(client)  # the rule has fired its two times


def test_server_error_and_its_count(aws, control, account_id):
    eks = aws("eks")
    _rule(control, service="eks", operation="*", kind="server_error", account_id=account_id)
    assert _error(eks.list_clusters) == ("InternalFailure", 500)
    eks.list_clusters()


def test_sdk_retries_throttling_and_the_call_log_counts_every_attempt(endpoint, control, account_id):
    _rule(control, service="eks", operation="ListClusters", kind="throttle", count=2, account_id=account_id)
    eks = boto3.client(
        "eks",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=account_id,
        aws_secret_access_key="x",
        config=Config(retries={"total_max_attempts": 3, "mode": "standard"}),
    )
    assert eks.list_clusters()["clusters"] == []
    _, calls = control.call("GET", f"/calls?account_id={account_id}")
    assert {(c["operation"], c["calls"], c["faulted"]) for c in calls if c["service"] == "eks"} == {
        ("ListClusters", 3, 2)
    }


def test_latency_is_added_to_the_named_operation_only(aws, control, account_id):
    ec2 = aws("ec2")
    rule = _rule(control, service="ec2", operation="DescribeVpcs", kind="latency", latency_ms=400, count=None, account_id=account_id)
    started = time.monotonic()
    ec2.describe_vpcs()
    assert time.monotonic() - started >= 0.4
    ec2.describe_subnets()
    listed = {r["id"]: r for r in control.call("GET", "/faults")[1]}[rule["id"]]
    assert (listed["seen"], listed["fired"]) == (1, 1)
    control.call("DELETE", f"/faults?account_id={account_id}")


def test_delayed_calls_overlap_instead_of_queueing(aws, control, account_id):
    clients = [aws("eks") for _ in range(4)]
    # Each client's first call resolves credentials and endpoints in
    # Python, CPU-bound under the GIL; make it before the clock starts.
    for client in clients:
        client.list_clusters()
    _rule(control, service="eks", operation="ListClusters", kind="latency", latency_ms=1000, count=None, account_id=account_id)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda client: client.list_clusters(), clients))
    elapsed = time.monotonic() - started
    control.call("DELETE", f"/faults?account_id={account_id}")
    # Four 1 s delays served one after another take at least 4 s; overlapping,
    # about 1 s. The margin between them absorbs a loaded machine.
    assert 1.0 <= elapsed < 2.5


def test_rules_are_scoped_to_their_account(aws, control, account_id):
    _rule(control, service="iam", operation="ListRoles", kind="throttle", count=None, account_id="400000000002")
    aws("iam").list_roles()
    control.call("DELETE", "/faults?account_id=400000000002")


def test_probability_fires_on_about_that_share_of_calls(aws, control, account_id):
    control.call("PUT", "/faults/seed", {"seed": 7})
    rule = _rule(control, service="sts", operation="GetCallerIdentity", kind="throttle", count=None, probability=0.2, account_id=account_id)
    sts = aws("sts")
    failures = 0
    for _ in range(200):
        try:
            sts.get_caller_identity()
        except ClientError:
            failures += 1
    assert 20 <= failures <= 60
    listed = {r["id"]: r for r in control.call("GET", "/faults")[1]}[rule["id"]]
    assert (listed["seen"], listed["fired"]) == (200, failures)
    control.call("DELETE", f"/faults?account_id={account_id}")


@pytest.mark.parametrize(
    "rule, field",
    [
        ({"service": "eks", "operation": "X", "kind": "explode"}, "kind"),
        ({"service": "eks", "kind": "throttle"}, "operation"),
        ({"service": "eks", "operation": "X", "kind": "throttle", "count": 0}, "count"),
        ({"service": "eks", "operation": "X", "kind": "latency"}, "latency_ms"),
        ({"service": "eks", "operation": "X", "kind": "throttle", "probabilty": 0.5}, "probabilty"),
    ],
)
def test_bad_rules_are_rejected_naming_the_field(control, rule, field):
    status, body = control.call("POST", "/faults", rule)
    assert status == 400
    assert field in body["error"]
