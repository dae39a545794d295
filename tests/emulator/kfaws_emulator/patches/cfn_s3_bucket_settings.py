"""AWS::S3::Bucket ``PublicAccessBlockConfiguration`` and ``VersioningConfiguration``.

AWS: the properties configure the bucket as PutPublicAccessBlock and
PutBucketVersioning would, on create and on update.
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-s3-bucket.html#cfn-s3-bucket-publicaccessblockconfiguration
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-s3-bucket.html#cfn-s3-bucket-versioningconfiguration

moto 5.2.5 applies ``BucketEncryption`` and ``Tags`` only.
"""

from __future__ import annotations

from moto.s3.models import FakeBucket, s3_backends
from moto.utilities.utils import get_partition

from ._common import wrap


def _configure(bucket, properties: dict, account_id: str, region_name: str) -> None:
    backend = s3_backends[account_id][get_partition(region_name)]
    if "PublicAccessBlockConfiguration" in properties:
        backend.put_public_access_block(bucket.name, properties["PublicAccessBlockConfiguration"])
    status = properties.get("VersioningConfiguration", {}).get("Status")
    if status:
        backend.put_bucket_versioning(bucket.name, status)


def apply() -> None:
    def make_create(original):
        def create_from_cloudformation_json(resource_name, cloudformation_json, account_id, region_name, **kwargs):
            bucket = original(resource_name, cloudformation_json, account_id, region_name, **kwargs)
            _configure(bucket, cloudformation_json.get("Properties", {}), account_id, region_name)
            return bucket

        return create_from_cloudformation_json

    def make_update(original):
        def update_from_cloudformation_json(original_resource, new_resource_name, cloudformation_json, account_id, region_name):
            bucket = original(
                original_resource=original_resource,
                new_resource_name=new_resource_name,
                cloudformation_json=cloudformation_json,
                account_id=account_id,
                region_name=region_name,
            )
            _configure(bucket, cloudformation_json.get("Properties", {}), account_id, region_name)
            return bucket

        return update_from_cloudformation_json

    wrap(FakeBucket, "create_from_cloudformation_json", make_create)
    wrap(FakeBucket, "update_from_cloudformation_json", make_update)
