"""ListStackResources and DescribeStackResources answer what the stack holds, and create nothing.

AWS lists the resources of a stack in any state, including one rolled back after a
failed create (``ROLLBACK_COMPLETE``), whose resources are gone.
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ListStackResources.html

moto 5.2.5 builds the list from the stack's resource map, which creates every resource
not created yet as it is read: after a rollback, listing the stack tries to create its
resources again, and a resource that failed (a bucket whose name is taken) fails the
listing itself with the resource's error. Limit: a rolled-back stack lists none of its
resources (AWS lists them as ``DELETE_COMPLETE``).
"""

from __future__ import annotations

from moto.cloudformation.models import Stack


def _held(stack: Stack) -> list:
    resource_map = stack.resource_map
    held = []
    for logical_id in resource_map._resource_json_map:
        resource = resource_map._parsed_resources.get(logical_id)
        if resource is not None and not isinstance(resource, (str, dict, list)):
            held.append(resource)
    return held


def apply() -> None:
    Stack.stack_resources = property(_held)
