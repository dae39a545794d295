"""The storage stack's resources: EFS attributes and the artifact bucket's settings.

EFS: ``Fn::GetAtt`` of AWS::EFS::FileSystem returns ``Arn`` and
``FileSystemId``; of AWS::EFS::MountTarget, ``IpAddress``
(https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-efs-filesystem.html#aws-resource-efs-filesystem-return-values,
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-efs-mounttarget.html#aws-resource-efs-mounttarget-return-values).
S3: AWS::S3::Bucket ``BucketEncryption``, ``PublicAccessBlockConfiguration``
and ``VersioningConfiguration`` configure the bucket
(https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-s3-bucket.html).
"""

import json

from conftest import wait_for


def _stack(cfn, name, template):
    stack_id = cfn.create_stack(StackName=name, TemplateBody=json.dumps(template))["StackId"]
    wait_for(lambda: cfn.describe_stacks(StackName=stack_id)["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE")
    stack = cfn.describe_stacks(StackName=stack_id)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def test_efs_attributes_resolve(aws, account_id):
    cfn, ec2, efs = aws("cloudformation"), aws("ec2"), aws("efs")
    vpc = ec2.create_vpc(CidrBlock="10.80.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.80.1.0/24")["Subnet"]["SubnetId"]
    outputs = _stack(
        cfn,
        "storage",
        {
            "Resources": {
                "Fs": {"Type": "AWS::EFS::FileSystem", "Properties": {"Encrypted": True}},
                "Mount": {
                    "Type": "AWS::EFS::MountTarget",
                    "Properties": {"FileSystemId": {"Ref": "Fs"}, "SubnetId": subnet},
                },
            },
            "Outputs": {
                "Ref": {"Value": {"Ref": "Fs"}},
                "Id": {"Value": {"Fn::GetAtt": ["Fs", "FileSystemId"]}},
                "Arn": {"Value": {"Fn::GetAtt": ["Fs", "Arn"]}},
                "Ip": {"Value": {"Fn::GetAtt": ["Mount", "IpAddress"]}},
            },
        },
    )
    fs = efs.describe_file_systems()["FileSystems"][0]
    mount = efs.describe_mount_targets(FileSystemId=fs["FileSystemId"])["MountTargets"][0]
    assert outputs == {
        "Ref": fs["FileSystemId"],
        "Id": fs["FileSystemId"],
        "Arn": fs["FileSystemArn"],
        "Ip": mount["IpAddress"],
    }
    assert fs["FileSystemArn"].startswith(f"arn:aws:elasticfilesystem:us-east-1:{account_id}:file-system/fs-")


def test_bucket_is_encrypted_versioned_and_blocks_public_access(aws, account_id):
    cfn, s3 = aws("cloudformation"), aws("s3")
    bucket = f"kfaws-artifacts-{account_id}"
    _stack(
        cfn,
        "storage",
        {
            "Resources": {
                "Artifacts": {
                    "Type": "AWS::S3::Bucket",
                    "Properties": {
                        "BucketName": bucket,
                        "BucketEncryption": {
                            "ServerSideEncryptionConfiguration": [
                                {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
                            ]
                        },
                        "PublicAccessBlockConfiguration": {
                            "BlockPublicAcls": True,
                            "BlockPublicPolicy": True,
                            "IgnorePublicAcls": True,
                            "RestrictPublicBuckets": True,
                        },
                        "VersioningConfiguration": {"Status": "Enabled"},
                    },
                }
            }
        },
    )
    rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "IgnorePublicAcls": True,
        "BlockPublicPolicy": True,
        "RestrictPublicBuckets": True,
    }
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
