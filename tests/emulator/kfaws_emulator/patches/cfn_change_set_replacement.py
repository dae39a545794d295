"""A change set says whether each modified resource is replaced.

AWS: every ``ResourceChange`` of a change set carries ``Replacement``
(``True``, ``False`` or ``Conditional``) and ``Scope``: a ``Modify`` that
changes a property documented as "Update requires: Replacement" makes a new
physical resource and deletes the old one (an IAM role's ``RoleName``, a
bucket's ``BucketName``, a subnet's ``CidrBlock``...).
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ResourceChange.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-update-behaviors.html
The properties per type are those the CloudFormation resource reference
marks "Update requires: Replacement", for the types kfaws's templates use:
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-template-resource-type-ref.html

moto 5.2.5 answers ``Action``, ``LogicalResourceId`` and ``ResourceType``
only. Limits: a property counts as changed when its template text differs
or it references a changed parameter (``Ref``, ``Fn::Sub``, conditions); a
change that arrives through another resource's attribute is not seen (AWS
says ``Conditional`` there); types outside the table are never replaced.
"""

from __future__ import annotations

from typing import Any

from moto.cloudformation.models import ChangeSet

from ._common import wrap
from .cfn_change_set_parameters import _references

# "Update requires: Replacement" in each type's CloudFormation reference page.
REPLACING: dict[str, frozenset[str]] = {
    "AWS::IAM::Role": frozenset({"RoleName", "Path"}),
    "AWS::S3::Bucket": frozenset({"BucketName"}),
    "AWS::EC2::VPC": frozenset({"CidrBlock"}),
    "AWS::EC2::Subnet": frozenset({"AvailabilityZone", "AvailabilityZoneId", "CidrBlock", "VpcId"}),
    "AWS::EC2::SecurityGroup": frozenset({"GroupName", "GroupDescription", "VpcId"}),
    "AWS::EC2::RouteTable": frozenset({"VpcId"}),
    "AWS::EC2::Route": frozenset({"RouteTableId", "DestinationCidrBlock", "DestinationIpv6CidrBlock"}),
    "AWS::EC2::SubnetRouteTableAssociation": frozenset({"SubnetId"}),
    "AWS::EC2::NatGateway": frozenset({"SubnetId", "AllocationId", "ConnectivityType"}),
    "AWS::EC2::VPCEndpoint": frozenset({"ServiceName", "VpcId", "VpcEndpointType"}),
    "AWS::EFS::FileSystem": frozenset({"Encrypted", "KmsKeyId", "PerformanceMode", "AvailabilityZoneName"}),
    "AWS::EFS::MountTarget": frozenset({"FileSystemId", "SubnetId", "IpAddress"}),
}


def changed_properties(old: dict[str, Any], new: dict[str, Any], parameters: set[str], conditions: dict) -> set[str]:
    """The property names of a resource whose value changes from ``old`` to ``new`` (resource
    declarations), by text or through one of the changed ``parameters``."""
    before = old.get("Properties") or {}
    after = new.get("Properties") or {}
    return {
        name
        for name in set(before) | set(after)
        if before.get(name) != after.get(name)
        or (name in after and parameters & _references(after[name], conditions))
    }


def apply() -> None:
    def make_diff(original):
        def diff(self):
            changes = original(self)
            resource_map = self.stack.resource_map
            old = resource_map._resource_json_map or {}
            new = self.template_dict.get("Resources") or {}
            given = self.parameters or {}
            parameters = {p for p in given if resource_map.input_parameters.get(p) != given[p]}
            conditions = self.template_dict.get("Conditions") or {}
            for change in changes:
                if change.action != "Modify":
                    continue
                name = change.logical_resource_id
                changed = changed_properties(old.get(name, {}), new.get(name, {}), parameters, conditions)
                replacing = REPLACING.get(change.resource_type, frozenset())
                change.replacement = "True" if changed & replacing else "False"
                change.scope = ["Properties"] if changed else []
            return changes

        return diff

    wrap(ChangeSet, "diff", make_diff)
