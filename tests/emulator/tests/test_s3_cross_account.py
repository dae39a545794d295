"""A bucket of another account is not served to this one.

AWS: a request from an account that neither owns the bucket nor is granted access by a
bucket policy or ACL is denied with 403 AccessDenied (HeadBucket: 403 with no body);
CreateBucket on a name another account holds fails with 409 BucketAlreadyExists.
https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadBucket.html
https://docs.aws.amazon.com/AmazonS3/latest/userguide/example-walkthroughs-managing-access-example2.html
https://docs.aws.amazon.com/AmazonS3/latest/API/API_CreateBucket.html

Patch ``s3_cross_account_access``; fails with ``--skip-patch s3_cross_account_access``.
"""

import secrets

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import REGION


def _other_account_s3(endpoint):
    other = "5" + "".join(secrets.choice("0123456789") for _ in range(11))
    session = boto3.session.Session(aws_access_key_id=other, aws_secret_access_key="test", region_name=REGION)
    config = Config(retries={"total_max_attempts": 1, "mode": "standard"})
    return session.client("s3", endpoint_url=endpoint, config=config)


def test_another_accounts_bucket_is_denied_and_its_name_stays_taken(aws, endpoint):
    name = f"held-{secrets.token_hex(6)}"
    owner = aws("s3")
    owner.create_bucket(Bucket=name)
    owner.put_bucket_tagging(Bucket=name, Tagging={"TagSet": [{"Key": "kfaws:deployment", "Value": "x"}]})
    stranger = _other_account_s3(endpoint)

    with pytest.raises(ClientError) as err:
        stranger.head_bucket(Bucket=name)
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    for call in (stranger.get_bucket_tagging, stranger.list_object_versions):
        with pytest.raises(ClientError) as err:
            call(Bucket=name)
        assert err.value.response["Error"]["Code"] == "AccessDenied", call
    with pytest.raises(ClientError) as err:
        stranger.create_bucket(Bucket=name)
    assert err.value.response["Error"]["Code"] == "BucketAlreadyExists"

    # The owner is served as before.
    owner.head_bucket(Bucket=name)
    assert owner.get_bucket_tagging(Bucket=name)["TagSet"][0]["Value"] == "x"
