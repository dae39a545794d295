"""A presigned STS GetCallerIdentity is checked like STS checks it, and answers its signer.

SigV4 query-string authentication: the signature is recomputed with the
caller's secret key; a mismatch or a request outside the 15-minute window is
``SignatureDoesNotMatch`` (403)
(https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html).
This is the request an EKS token carries (the ``x-k8s-aws-id`` header signed
in), https://github.com/kubernetes-sigs/aws-iam-authenticator#how-does-it-work.
"""

import datetime as dt
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from unittest import mock

from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

NS = {"sts": "https://sts.amazonaws.com/doc/2011-06-15/"}


def _presign(endpoint, access_key, secret, when=None, cluster="ml", token=None):
    request = AWSRequest(
        method="GET",
        url=f"{endpoint}/",
        params={"Action": "GetCallerIdentity", "Version": "2011-06-15"},
        headers={"x-k8s-aws-id": cluster},
    )
    signer = SigV4QueryAuth(Credentials(access_key, secret, token), "sts", "us-east-1", expires=60)
    with mock.patch("botocore.auth.get_current_datetime", return_value=when or dt.datetime.now(dt.timezone.utc)):
        signer.add_auth(request)
    return request.url


def _get(url, cluster="ml"):
    request = urllib.request.Request(url, headers={"x-k8s-aws-id": cluster})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _code(body):
    return ET.fromstring(body).find(".//Code").text


def test_a_valid_presigned_request_answers_the_signer(endpoint, account_id):
    status, body = _get(_presign(endpoint, account_id, "test"))
    assert status == 200, body
    assert ET.fromstring(body).find(".//sts:Account", NS).text == account_id


def test_a_wrong_secret_is_refused(endpoint, account_id):
    status, body = _get(_presign(endpoint, account_id, "not-the-secret"))
    assert status == 403
    assert _code(body) == "SignatureDoesNotMatch"


def test_a_changed_signature_is_refused(endpoint, account_id):
    url = _presign(endpoint, account_id, "test")
    head, signature = url.rsplit("X-Amz-Signature=", 1)
    flipped = ("0" if signature[0] != "0" else "1") + signature[1:]
    status, body = _get(f"{head}X-Amz-Signature={flipped}")
    assert status == 403
    assert _code(body) == "SignatureDoesNotMatch"


def test_a_changed_signed_header_is_refused(endpoint, account_id):
    status, body = _get(_presign(endpoint, account_id, "test", cluster="ml"), cluster="other")
    assert status == 403
    assert _code(body) == "SignatureDoesNotMatch"


def test_a_request_older_than_15_minutes_is_refused(endpoint, account_id):
    when = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=16)
    status, body = _get(_presign(endpoint, account_id, "test", when=when))
    assert status == 403
    assert _code(body) == "SignatureDoesNotMatch"
    assert "Signature expired" in body


def test_an_assumed_role_session_is_served_as_itself(aws, endpoint, account_id):
    iam = aws("iam")
    iam.create_role(
        RoleName="reader",
        AssumeRolePolicyDocument=(
            '{"Version":"2012-10-17","Statement":[{"Effect":"Allow",'
            f'"Principal":{{"AWS":"arn:aws:iam::{account_id}:root"}},"Action":"sts:AssumeRole"}}]}}'
        ),
    )
    creds = aws("sts").assume_role(RoleArn=f"arn:aws:iam::{account_id}:role/reader", RoleSessionName="s1")[
        "Credentials"
    ]
    url = _presign(endpoint, creds["AccessKeyId"], creds["SecretAccessKey"], token=creds["SessionToken"])
    status, body = _get(url)
    assert status == 200, body
    assert ET.fromstring(body).find(".//sts:Arn", NS).text == f"arn:aws:sts::{account_id}:assumed-role/reader/s1"
    status, body = _get(_presign(endpoint, creds["AccessKeyId"], "test", token=creds["SessionToken"]))
    assert status == 403
