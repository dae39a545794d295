"""``Fn::GetAtt`` on AWS::EFS::FileSystem (Arn, FileSystemId) and AWS::EFS::MountTarget (IpAddress).

https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-efs-filesystem.html#aws-resource-efs-filesystem-return-values
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-efs-mounttarget.html#aws-resource-efs-mounttarget-return-values

moto 5.2.5 supports only ``Ref`` on both: a GetAtt in a resource fails it,
and a GetAtt in an output silently drops every output of the stack.
"""

from __future__ import annotations

from moto.cloudformation.exceptions import UnformattedGetAttTemplateException
from moto.efs.models import FileSystem, MountTarget

_ATTRIBUTES = {
    FileSystem: {"Arn": "file_system_arn", "FileSystemId": "file_system_id"},
    MountTarget: {"IpAddress": "ip_address"},
}


def apply() -> None:
    for model, attributes in _ATTRIBUTES.items():

        def has_cfn_attr(cls, attr: str, _attributes=attributes) -> bool:
            return attr in _attributes

        def get_cfn_attribute(self, attribute_name: str, _attributes=attributes):
            if attribute_name not in _attributes:
                raise UnformattedGetAttTemplateException()
            return getattr(self, _attributes[attribute_name])

        model.has_cfn_attr = classmethod(has_cfn_attr)
        model.get_cfn_attribute = get_cfn_attribute
