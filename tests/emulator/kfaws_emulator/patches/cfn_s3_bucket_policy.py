"""CloudFormation ``AWS::S3::BucketPolicy``.

AWS: applies ``PolicyDocument`` to ``Bucket`` (PutBucketPolicy), replaces it
on update, removes it (DeleteBucketPolicy) with the resource.
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-s3-bucketpolicy.html

moto 5.2.5 has no model for the type and skips it silently.
"""

from __future__ import annotations

import json
from typing import Any

from moto.cloudformation import parsing
from moto.core.common_models import CloudFormationModel
from moto.s3.exceptions import MissingBucket
from moto.s3.models import s3_backends
from moto.utilities.utils import get_partition


def _s3(account_id: str, region_name: str):
    return s3_backends[account_id][get_partition(region_name)]


class BucketPolicy(CloudFormationModel):
    """One bucket's policy, owned by a stack."""

    def __init__(self, bucket_name: str) -> None:
        self.bucket_name = bucket_name

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::S3::BucketPolicy"

    @staticmethod
    def cloudformation_name_type() -> str:
        return ""

    @property
    def physical_resource_id(self) -> str:
        return self.bucket_name

    @classmethod
    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs: Any):
        properties = cloudformation_json["Properties"]
        bucket = properties["Bucket"]
        document = properties["PolicyDocument"]
        text = document if isinstance(document, str) else json.dumps(document)
        _s3(account_id, region_name).put_bucket_policy(bucket, text.encode())
        return cls(bucket)

    @classmethod
    def update_from_cloudformation_json(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name):
        if cloudformation_json["Properties"]["Bucket"] != original_resource.bucket_name:
            original_resource.delete(account_id, region_name)
        return cls.create_from_cloudformation_json(new_resource_name, cloudformation_json, account_id, region_name)

    @classmethod
    def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name) -> None:
        cls(resource_name).delete(account_id, region_name)

    def delete(self, account_id: str, region_name: str) -> None:
        try:
            _s3(account_id, region_name).delete_bucket_policy(self.bucket_name)
        except MissingBucket:
            pass  # the policy went with its bucket


def apply() -> None:
    # Defining the subclass registers it; drop moto's cached model lists.
    for cached in (parsing.get_model_list, parsing.get_model_map, parsing.get_name_type_map):
        cached.cache_clear()
    if parsing.get_model_map().get("AWS::S3::BucketPolicy") is not BucketPolicy:
        raise RuntimeError("moto did not register the AWS::S3::BucketPolicy model")
