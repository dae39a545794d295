"""The emulated EKS cluster answers the API server registered for its account, and its creator.

AWS Cluster ``endpoint`` / ``certificateAuthority.data``: the cluster's
Kubernetes API server and the base64 PEM of its CA
(https://docs.aws.amazon.com/eks/latest/APIReference/API_Cluster.html); the
creating principal gets cluster-admin access
(https://docs.aws.amazon.com/eks/latest/userguide/access-entries.html).
"""

import base64
import datetime as dt

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _ca_data() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    return base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode()


def _create(aws, account_id, name):
    ec2 = aws("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.96.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.96.1.0/24")["Subnet"]["SubnetId"]
    return aws("eks").create_cluster(
        name=name,
        roleArn=f"arn:aws:iam::{account_id}:role/cluster",
        resourcesVpcConfig={"subnetIds": [subnet]},
    )["cluster"]


def test_clusters_answer_the_registered_endpoint_and_ca(aws, account_id, control):
    before = _create(aws, account_id, "before")
    ca = _ca_data()
    status, body = control.call(
        "PUT",
        "/eks/cluster-endpoint",
        {"endpoint": "https://127.0.0.1:6443", "certificate_authority_data": ca, "account_id": account_id},
    )
    assert status == 200, body
    assert body["clusters"] == 1

    after = _create(aws, account_id, "after")
    assert after["endpoint"] == "https://127.0.0.1:6443"
    assert after["certificateAuthority"]["data"] == ca
    for name in ("before", "after"):
        described = aws("eks").describe_cluster(name=name)["cluster"]
        assert described["endpoint"] == "https://127.0.0.1:6443"
        assert described["certificateAuthority"]["data"] == ca
    assert before["endpoint"] != "https://127.0.0.1:6443"


def test_another_account_keeps_its_own_endpoint(aws, account_id, control):
    status, body = control.call(
        "PUT",
        "/eks/cluster-endpoint",
        {"endpoint": "https://127.0.0.1:6443", "certificate_authority_data": _ca_data(), "account_id": "499999999999"},
    )
    assert status == 200, body
    assert _create(aws, account_id, "ml")["endpoint"] != "https://127.0.0.1:6443"


def test_registration_names_the_bad_field(control):
    status, body = control.call("PUT", "/eks/cluster-endpoint", {"endpoint": "http://127.0.0.1:1"})
    assert status == 400
    assert "'endpoint'" in body["error"] and "https" in body["error"]
    status, body = control.call(
        "PUT", "/eks/cluster-endpoint", {"endpoint": "https://127.0.0.1:1", "certificate_authority_data": "bm9wZQ=="}
    )
    assert status == 400
    assert "'certificate_authority_data'" in body["error"]


def test_the_creator_is_recorded(aws, account_id, control):
    _create(aws, account_id, "ml")
    identity = aws("sts").get_caller_identity()
    status, body = control.call("GET", f"/eks/cluster-creator?account_id={account_id}&region=us-east-1&name=ml")
    assert status == 200, body
    assert body["arn"] == identity["Arn"]
    status, body = control.call("GET", f"/eks/cluster-creator?account_id={account_id}&region=us-east-1&name=other")
    assert status == 404
    assert "other" in body["error"]
