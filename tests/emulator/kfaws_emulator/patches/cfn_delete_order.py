"""A stack's resources are deleted in reverse dependency order, each with its events.

AWS: a resource that refers to another (``Ref``, ``Fn::GetAtt``, ``Fn::Sub``)
or names it in ``DependsOn`` is created after it and deleted before it, and
each deletion is recorded as DELETE_IN_PROGRESS and DELETE_COMPLETE stack
events for that resource. A resource already deleted outside CloudFormation
counts as deleted: a resource type's delete handler answers ``NotFound`` for
a resource that no longer exists, and the stack's deletion goes on
(CloudFormation CLI, "Resource type handler contract", delete handlers).
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-dependson.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/view-stack-events.html
https://docs.aws.amazon.com/cloudformation-cli/latest/userguide/resource-type-test-contract.html

moto 5.2.5 deletes in arbitrary order and retries what fails, which deletes a
route table before the VPC endpoint that routes through it (and then fails
on the endpoint), and hides real dependency errors behind retries. Here the
first failure stops the deletion, as it marks the stack DELETE_FAILED in AWS.
"""

from __future__ import annotations

import re
from graphlib import TopologicalSorter

from moto.cloudformation.models import Event, Stack
from moto.cloudformation.parsing import ResourceMap

from ._common import wrap

_SUB_REFERENCE = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z0-9.]+)?\}")
# Error codes of a resource that does not exist: IAM NoSuchEntity, EC2
# Invalid*.NotFound, S3 NoSuchBucket, EFS FileSystemNotFound, ...
_GONE = re.compile(r"NotFound|NoSuch")


def already_gone(err: BaseException) -> bool:
    """Whether ``err`` says the resource being deleted no longer exists."""
    # moto's REST errors carry the code as ``error_type`` (``code`` is the
    # HTTP status); its service exceptions (IAM, ...) as ``code``.
    codes = (getattr(err, "error_type", None), getattr(err, "code", None))
    return any(isinstance(c, str) and _GONE.search(c) for c in codes)


def _references(node, names: set[str], found: set[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and value in names:
                found.add(value)
            elif key == "Fn::GetAtt":
                target = value[0] if isinstance(value, list) else str(value).split(".")[0]
                if target in names:
                    found.add(target)
            elif key == "Fn::Sub":
                text = value[0] if isinstance(value, list) else value
                found.update(n for n in _SUB_REFERENCE.findall(str(text)) if n in names)
            _references(value, names, found)
    elif isinstance(node, list):
        for item in node:
            _references(item, names, found)


def deletion_order(resources: dict[str, dict]) -> list[str]:
    """Logical ids, dependants before what they depend on."""
    names = set(resources)
    graph = {}
    for logical_id, definition in resources.items():
        found: set[str] = set()
        _references(definition.get("Properties", {}), names, found)
        depends_on = definition.get("DependsOn", [])
        found.update([depends_on] if isinstance(depends_on, str) else depends_on)
        graph[logical_id] = found & names
    return list(reversed(list(TopologicalSorter(graph).static_order())))


def _event(stack: Stack | None, logical_id: str, resource, resource_type: str, status: str) -> None:
    if stack is not None:
        stack.events.append(
            Event(
                stack_id=stack.stack_id,
                stack_name=stack.name,
                logical_resource_id=logical_id,
                physical_resource_id=getattr(resource, "physical_resource_id", "") or "",
                resource_type=resource_type,
                resource_status=status,
                resource_status_reason=None,
                resource_properties=None,
            )
        )


def apply() -> None:
    def make_create_resource_map(original):
        def _create_resource_map(self):
            resource_map = original(self)
            # The map records deletion events on its stack.
            resource_map.kfaws_stack = self
            return resource_map

        return _create_resource_map

    wrap(Stack, "_create_resource_map", make_create_resource_map)

    def make_delete(original):
        def delete(self):
            stack = getattr(self, "kfaws_stack", None)
            for logical_id in deletion_order(self._resource_json_map):
                definition = self._resource_json_map[logical_id]
                parsed = self._parsed_resources.get(logical_id)
                if definition.get("DeletionPolicy") == "Retain" or parsed is None or isinstance(parsed, str):
                    continue
                resource_type = definition.get("Type", "")
                _event(stack, logical_id, parsed, resource_type, "DELETE_IN_PROGRESS")
                try:
                    self._delete_resource(parsed, definition)
                except Exception as err:  # noqa: BLE001 - re-raised unless the resource is gone
                    if not already_gone(err):
                        raise
                self._parsed_resources.pop(logical_id)
                _event(stack, logical_id, parsed, resource_type, "DELETE_COMPLETE")
            # Only retained or never-created resources remain: moto's own pass
            # finds nothing left to delete.
            return original(self)

        return delete

    wrap(ResourceMap, "delete", make_delete)
