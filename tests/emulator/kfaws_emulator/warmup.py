"""Warm-up: pay moto's first-use costs once, before the first test does.

moto imports a service's code, builds its backends and, for CloudFormation,
loads cfn-lint and the resource models on first use; the first CloudFormation
call alone costs seconds. The warm-up makes one representative call per
service that kfaws uses, in a reserved account (``WARMUP_ACCOUNT``) so the
accounts tests use start empty.
"""

from __future__ import annotations

import json

import boto3
from botocore.config import Config

WARMUP_ACCOUNT = "999999999999"

_TEMPLATE = {
    "Resources": {
        "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.99.0.0/16"}},
        "Role": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "eks.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                },
                "ManagedPolicyArns": ["arn:aws:iam::aws:policy/AmazonEKSClusterPolicy"],
            },
        },
    }
}


def warm_up(endpoint: str) -> None:
    """Makes the warm-up calls against ``endpoint``; raises on any failure."""
    session = boto3.session.Session(
        aws_access_key_id=WARMUP_ACCOUNT,
        aws_secret_access_key="warmup",
        region_name="us-east-1",
    )
    config = Config(retries={"total_max_attempts": 1, "mode": "standard"})

    def client(name):
        return session.client(name, endpoint_url=endpoint, config=config)

    client("sts").get_caller_identity()
    client("iam").list_policies(Scope="AWS", MaxItems=1)
    client("ec2").describe_vpcs()
    client("eks").list_clusters()
    client("efs").describe_file_systems()
    client("s3").list_buckets()
    cfn = client("cloudformation")
    cfn.create_stack(StackName="kfaws-warmup", TemplateBody=json.dumps(_TEMPLATE))
    cfn.describe_stacks(StackName="kfaws-warmup")
    cfn.delete_stack(StackName="kfaws-warmup")
