"""A CloudFormation update of an ``AWS::IAM::Role`` applies its new trust policy.

AWS: ``AssumeRolePolicyDocument`` — "Update requires: No interruption": an
update that changes the template's trust policy (a new IRSA subject, after
a namespace rename) sets it on the role, as UpdateAssumeRolePolicy does.
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-iam-role.html#cfn-iam-role-assumerolepolicydocument

moto 5.2.5 updates only the role's description and session duration: the
role keeps its old trust policy after the stack update completes.
"""

from __future__ import annotations

import json

from moto.iam.models import Role, iam_backends
from moto.utilities.utils import get_partition

from ._common import wrap


def apply() -> None:
    def make_update(original):
        def update_from_cloudformation_json(original_resource, new_resource_name, cloudformation_json, account_id, region_name):
            role = original(
                original_resource=original_resource,
                new_resource_name=new_resource_name,
                cloudformation_json=cloudformation_json,
                account_id=account_id,
                region_name=region_name,
            )
            document = cloudformation_json.get("Properties", {}).get("AssumeRolePolicyDocument")
            if document is not None:
                text = document if isinstance(document, str) else json.dumps(document)
                iam_backends[account_id][get_partition(region_name)].update_assume_role_policy(role.name, text)
            return role

        return update_from_cloudformation_json

    wrap(Role, "update_from_cloudformation_json", make_update)
