"""The control API's own routes, and request bodies that reach moto intact."""

import http.client
import urllib.parse


def test_health_reports_a_warm_emulator(control):
    status, body = control.call("GET", "/health")
    assert status == 200
    assert body["status"] == "ok" and body["moto"] == "5.2.5"


def test_unknown_route_is_404_naming_it(control):
    status, body = control.call("GET", "/nothing")
    assert status == 404
    assert "/_kfaws/nothing" in body["error"]


def test_account_id_must_be_twelve_digits(control):
    status, body = control.call("GET", "/calls?account_id=abc")
    assert status == 400
    assert "account_id" in body["error"]
    status, body = control.call("POST", "/faults", {"service": "eks", "operation": "*", "kind": "throttle", "account_id": "12"})
    assert status == 400
    assert "account_id" in body["error"]


def test_invalid_json_body_is_rejected(endpoint):
    url = urllib.parse.urlsplit(endpoint)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    connection.request("POST", "/_kfaws/faults", body=b"{not json")
    response = connection.getresponse()
    assert response.status == 400
    assert b"not valid JSON" in response.read()


def test_chunked_request_body_reaches_moto(endpoint, account_id, aws):
    bucket = f"chunked-{account_id}"
    aws("s3").create_bucket(Bucket=bucket)
    url = urllib.parse.urlsplit(endpoint)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    connection.request(
        "PUT",
        f"/{bucket}/object",
        body=iter([b"hello ", b"chunked ", b"world"]),
        headers={
            "Authorization": f"AWS4-HMAC-SHA256 Credential={account_id}/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0",
            "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
        },
        encode_chunked=True,
    )
    assert connection.getresponse().status == 200
    assert aws("s3").get_object(Bucket=bucket, Key="object")["Body"].read() == b"hello chunked world"


def test_reset_forgets_every_account(control, aws, account_id):
    aws("s3").create_bucket(Bucket=f"reset-{account_id}")
    control.call("POST", "/faults", {"service": "eks", "operation": "*", "kind": "throttle", "count": None, "account_id": account_id})

    status, _ = control.call("POST", "/reset")
    assert status == 200
    assert control.call("GET", "/calls")[1] == []
    assert control.call("GET", "/faults")[1] == []
    assert aws("s3").list_buckets()["Buckets"] == []


def test_the_call_log_tells_put_object_from_copy_object(control, aws, account_id):
    # Same method and path; CopyObject requires the x-amz-copy-source header.
    s3 = aws("s3")
    bucket = f"calls-{account_id}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="a", Body=b"x")
    s3.put_object(Bucket=bucket, Key="b", Body=b"y")
    s3.copy_object(Bucket=bucket, Key="c", CopySource={"Bucket": bucket, "Key": "a"})
    status, calls = control.call("GET", f"/calls?account_id={account_id}")
    assert status == 200
    counts = {c["operation"]: c["calls"] for c in calls if c["service"] == "s3"}
    assert counts.get("PutObject") == 2, counts
    assert counts.get("CopyObject") == 1, counts


def test_the_call_log_names_rest_operations_whose_label_holds_an_encoded_slash(control, aws, account_id):
    # EKS's principalArn (arn:...:role/path/name) is one URL-encoded path
    # segment of /clusters/{name}/access-entries/{principalArn}: matched on
    # the decoded path it would split and name no operation.
    ec2 = aws("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.97.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.97.1.0/24")["Subnet"]["SubnetId"]
    eks = aws("eks")
    eks.create_cluster(
        name="calls",
        roleArn=f"arn:aws:iam::{account_id}:role/cluster",
        resourcesVpcConfig={"subnetIds": [subnet]},
        accessConfig={"authenticationMode": "API_AND_CONFIG_MAP"},
    )
    principal = f"arn:aws:iam::{account_id}:role/team/ml-reader"
    eks.create_access_entry(clusterName="calls", principalArn=principal)
    eks.describe_access_entry(clusterName="calls", principalArn=principal)
    eks.list_associated_access_policies(clusterName="calls", principalArn=principal)
    eks.delete_access_entry(clusterName="calls", principalArn=principal)
    _, calls = control.call("GET", f"/calls?account_id={account_id}")
    counts = {c["operation"]: c["calls"] for c in calls if c["service"] == "eks"}
    for operation in ("CreateAccessEntry", "DescribeAccessEntry", "ListAssociatedAccessPolicies", "DeleteAccessEntry"):
        assert counts.get(operation) == 1, counts
    assert "Unknown" not in counts, counts
