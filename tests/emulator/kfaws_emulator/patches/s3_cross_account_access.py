"""A bucket of another account is refused, and its name stays taken.

AWS: a request from an account that neither owns the bucket nor is granted access by a
bucket policy or ACL is denied with 403 AccessDenied (HeadBucket: 403 without a body)
(https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadBucket.html,
https://docs.aws.amazon.com/AmazonS3/latest/userguide/access-policy-language-overview.html);
CreateBucket on a name another account holds fails with 409 BucketAlreadyExists
(https://docs.aws.amazon.com/AmazonS3/latest/API/API_CreateBucket.html).

moto 5.2.5 serves every bucket to every account. Its own setting
``MOTO_S3_ALLOW_CROSSACCOUNT_ACCESS=false`` (read on each request) denies them, but then also
answers CreateBucket on another account's name with AccessDenied (it looks the bucket up to
tell "already owned by you" from "already exists"); that is turned back into
BucketAlreadyExists.
"""

from __future__ import annotations

import os

from moto.s3.exceptions import AccessDeniedByLock, BucketAlreadyExists
from moto.s3.responses import S3Response

from ._common import wrap


def apply() -> None:
    os.environ["MOTO_S3_ALLOW_CROSSACCOUNT_ACCESS"] = "false"

    def make_put(original):
        def _bucket_response_put(self, request, bucket_name, querystring):
            try:
                return original(self, request, bucket_name, querystring)
            except AccessDeniedByLock:
                # A PUT on the bucket itself, with no subresource, is CreateBucket.
                if querystring:
                    raise
                raise BucketAlreadyExists(bucket=bucket_name) from None

        return _bucket_response_put

    wrap(S3Response, "_bucket_response_put", make_put)
