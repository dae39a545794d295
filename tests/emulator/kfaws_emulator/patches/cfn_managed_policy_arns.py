"""CloudFormation ``AWS::IAM::Role`` ``ManagedPolicyArns`` and, in updates, ``Policies``.

AWS: "A list of Amazon Resource Names (ARNs) of the IAM managed policies that
you want to attach to the role"; deleting the stack detaches them before the
role is deleted, and an update attaches and detaches to match the new list.
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-iam-role.html#cfn-iam-role-managedpolicyarns

moto 5.2.5 ignores the property: the role is created with no policy attached.
An ARN that names no policy fails the resource, as in AWS (the IAM
AttachRolePolicy error NoSuchEntity becomes the resource's reason).

``Policies`` (inline policies): moto puts them at create (a document given
as an object is kept as one, and GetRolePolicy answers its Python repr, not
the JSON IAM returns) but an update
changes only the description; AWS puts the new template's policies and
deletes those the old template had and the new one has not (inline policies
added outside CloudFormation stay).
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-iam-role.html#cfn-iam-role-policies
"""

from __future__ import annotations

import json

from moto.iam.models import Role, iam_backends
from moto.utilities.utils import get_partition

from ._common import wrap


def _backend(account_id: str, region_name: str):
    return iam_backends[account_id][get_partition(region_name)]


def _policies(cloudformation_json: dict) -> list:
    return cloudformation_json.get("Properties", {}).get("Policies") or []


def apply() -> None:
    def make_create(original):
        def create_from_cloudformation_json(resource_name, cloudformation_json, account_id, region_name, **kwargs):
            role = original(resource_name, cloudformation_json, account_id, region_name, **kwargs)
            backend = _backend(account_id, region_name)
            try:
                for arn in cloudformation_json.get("Properties", {}).get("ManagedPolicyArns", []):
                    backend.attach_role_policy(arn, role.name)
            except Exception:
                # A failed resource leaves nothing behind: CloudFormation
                # only rolls back resources that were created.
                for arn in list(role.managed_policies):
                    backend.detach_role_policy(arn, role.name)
                backend.delete_role(role.name)
                raise
            # moto stores a template's document object as it is, and
            # GetRolePolicy then answers its Python repr; IAM holds JSON.
            for p in _policies(cloudformation_json):
                if not isinstance(p["PolicyDocument"], str):
                    role.put_policy(p["PolicyName"], json.dumps(p["PolicyDocument"]))
            role.kfaws_cfn_inline = {p["PolicyName"] for p in _policies(cloudformation_json)}
            return role

        return create_from_cloudformation_json

    def make_delete(original):
        def delete_from_cloudformation_json(resource_name, cloudformation_json, account_id, region_name):
            backend = _backend(account_id, region_name)
            role = backend.roles.get(resource_name) or next(
                (r for r in backend.roles.values() if r.name == resource_name), None
            )
            if role is not None:
                for arn in list(role.managed_policies):
                    backend.detach_role_policy(arn, role.name)
            return original(resource_name, cloudformation_json, account_id, region_name)

        return delete_from_cloudformation_json

    def make_update(original):
        def update_from_cloudformation_json(original_resource, new_resource_name, cloudformation_json, account_id, region_name):
            role = original(
                original_resource=original_resource,
                new_resource_name=new_resource_name,
                cloudformation_json=cloudformation_json,
                account_id=account_id,
                region_name=region_name,
            )
            backend = _backend(account_id, region_name)
            wanted = set(cloudformation_json.get("Properties", {}).get("ManagedPolicyArns", []))
            for arn in set(role.managed_policies) - wanted:
                backend.detach_role_policy(arn, role.name)
            for arn in wanted - set(role.managed_policies):
                backend.attach_role_policy(arn, role.name)
            inline = {p["PolicyName"]: p["PolicyDocument"] for p in _policies(cloudformation_json)}
            for name in getattr(role, "kfaws_cfn_inline", set()) - set(inline):
                backend.delete_role_policy(role.name, name)
            for name, document in inline.items():
                text = document if isinstance(document, str) else json.dumps(document)
                backend.put_role_policy(role.name, name, text)
            role.kfaws_cfn_inline = set(inline)
            return role

        return update_from_cloudformation_json

    wrap(Role, "create_from_cloudformation_json", make_create)
    wrap(Role, "update_from_cloudformation_json", make_update)
    wrap(Role, "delete_from_cloudformation_json", make_delete)
