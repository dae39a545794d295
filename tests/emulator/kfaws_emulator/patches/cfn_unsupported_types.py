"""A resource type the emulator cannot create fails its resource, naming the type.

Not an AWS behaviour but a refusal to lie: moto 5.2.5 skips a type it has no
model for (only a log line) and reports the stack CREATE_COMPLETE without
the resource, so a test would pass on something that was never made. Here
the resource fails (CREATE_FAILED with the reason, then the stack's
OnFailure handling, see cfn_stack_failure); the fix is to add the type to
the emulator or not use it. ``Custom::`` types and the types moto treats as
no-ops on purpose (WaitCondition, WaitConditionHandle) are left alone.
"""

from __future__ import annotations

from importlib.metadata import version

from moto.cloudformation import parsing

from ._common import wrap


class UnsupportedResourceType(Exception):
    """A template resource of a type the emulator has no model for."""

    def __init__(self, resource_type: str) -> None:
        self.error_type = "UnsupportedResourceType"
        self.message = (
            f"Resource type {resource_type} is not supported by the kfaws emulator "
            f"(moto {version('moto')}): add it under tests/emulator/kfaws_emulator/patches or avoid it"
        )
        super().__init__(self.message)


def apply() -> None:
    def make_parse_resource(original):
        def parse_resource(resource_json, resources_map):
            resource_type = resource_json["Type"]
            known = (
                resource_type in parsing.NULL_MODELS
                or resource_type.startswith("Custom::")
                or resource_type in parsing.get_model_map()
            )
            if not known:
                raise UnsupportedResourceType(resource_type)
            return original(resource_json, resources_map)

        return parse_resource

    wrap(parsing, "parse_resource", make_parse_resource)
