"""CloudFormation replaces an ``AWS::IAM::Role`` whose ``RoleName`` changes.

AWS: ``RoleName`` — "Update requires: Replacement". CloudFormation creates
the role under the new name (with its trust policy, inline and managed
policies) and deletes the old one in the update's cleanup phase.
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-iam-role.html#cfn-iam-role-rolename
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-update-behaviors.html

moto 5.2.5 updates the role in place under the new name, which does not
exist yet, and the stack update fails with ``Role <new> not found``.
"""

from __future__ import annotations

from moto.iam.models import Role

from ._common import wrap


def apply() -> None:
    def make_update(original):
        def update_from_cloudformation_json(original_resource, new_resource_name, cloudformation_json, account_id, region_name):
            new_name = cloudformation_json.get("Properties", {}).get("RoleName")
            if new_name is None or new_name == original_resource.name:
                return original(
                    original_resource=original_resource,
                    new_resource_name=new_resource_name,
                    cloudformation_json=cloudformation_json,
                    account_id=account_id,
                    region_name=region_name,
                )
            # Replacement: the new role first (a failure leaves the old one
            # in place), then the old one goes.
            role = Role.create_from_cloudformation_json(new_name, cloudformation_json, account_id, region_name)
            Role.delete_from_cloudformation_json(original_resource.name, {}, account_id, region_name)
            return role

        return update_from_cloudformation_json

    wrap(Role, "update_from_cloudformation_json", make_update)
