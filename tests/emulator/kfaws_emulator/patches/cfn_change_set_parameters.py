"""Change sets see parameter changes, and executing one updates the stack like UpdateStack.

AWS: a change set lists every resource an update would modify, including
resources whose properties change only because a parameter they use changed
(directly with ``Ref``/``Fn::Sub``, or through a condition); executing it
updates the stack with the change set's template *and parameters*, and the
stack's parameters and outputs are then the new ones.
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-changesets.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ExecuteChangeSet.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ResourceChangeDetail.html
(``ChangeSource: ParameterReference``)

moto 5.2.5 computes a change set's changes from the template alone (a
parameter-only change set is CREATE_COMPLETE with no changes), follows only
``Ref`` even for UpdateStack (not ``Fn::Sub`` or conditions), and after
ExecuteChangeSet keeps the stack's old parameters and outputs.
"""

from __future__ import annotations

import re
from typing import Any

from moto.cloudformation.models import ChangeSet, CloudFormationBackend, Change
from moto.cloudformation.parsing import ResourceMap

from ._common import wrap

_SUB_VARIABLE = re.compile(r"\$\{([A-Za-z0-9_.:]+)\}")


def _references(node: Any, conditions: dict[str, Any], seen: set[str] | None = None) -> set[str]:
    """Parameter and resource names ``node`` uses: ``Ref``, ``Fn::Sub`` variables,
    and, through ``Fn::If`` / ``Condition``, the references of the conditions it names."""
    seen = set() if seen is None else seen
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and isinstance(value, str):
                found.add(value)
            elif key == "Fn::Sub":
                text = value[0] if isinstance(value, list) and value else value
                if isinstance(text, str):
                    found.update(_SUB_VARIABLE.findall(text))
                if isinstance(value, list) and len(value) > 1:
                    found |= _references(value[1], conditions, seen)
            elif key in ("Fn::If", "Condition"):
                name = value[0] if key == "Fn::If" and isinstance(value, list) and value else value
                if isinstance(name, str) and name in conditions and name not in seen:
                    seen.add(name)
                    found |= _references(conditions[name], conditions, seen)
                if key == "Fn::If" and isinstance(value, list):
                    found |= _references(value[1:], conditions, seen)
            else:
                found |= _references(value, conditions, seen)
    elif isinstance(node, list):
        for item in node:
            found |= _references(item, conditions, seen)
    return found


def apply() -> None:
    def make_build_resource_diff(original):
        def build_resource_diff(self, other_template, parameters=None):
            actions = original(self, other_template, parameters)
            if not parameters:
                return actions
            changed = {p for p in parameters if self.input_parameters.get(p) != parameters[p]}
            conditions = other_template.get("Conditions", {}) or {}
            old = self._resource_json_map
            for name, resource in other_template["Resources"].items():
                if name in old and name not in actions["Modify"] and changed & _references(resource, conditions):
                    actions["Modify"].append(name)
            return actions

        return build_resource_diff

    def diff(self) -> list[Change]:
        resource_map = self.stack.resource_map
        actions = resource_map.build_resource_diff(self.template_dict, self.parameters or None)
        changes = []
        for action in ("Add", "Modify", "Remove"):
            for name in actions[action]:
                source = resource_map._resource_json_map if action == "Remove" else self.template_dict["Resources"]
                changes.append(Change(action=action, logical_resource_id=name, resource_type=source[name]["Type"]))
        return changes

    def make_execute_change_set(original):
        def execute_change_set(self, change_set_name, stack_name=None):
            change_set = next(
                (
                    cs
                    for arn, cs in self.change_sets.items()
                    if change_set_name in (arn, cs.change_set_name)
                    and (stack_name is None or stack_name in (cs.stack_name, cs.stack_id))
                ),
                None,
            )
            original(self, change_set_name, stack_name)
            if change_set is not None and change_set.change_set_type == "UPDATE":
                stack = self.stacks[change_set.stack_id]
                if change_set.parameters:
                    stack.parameters = dict(change_set.parameters)
                if change_set.tags is not None:
                    stack.tags = change_set.tags
                stack.output_map = stack._create_output_map()

        return execute_change_set

    wrap(ResourceMap, "build_resource_diff", make_build_resource_diff)
    ChangeSet.diff = diff
    wrap(CloudFormationBackend, "execute_change_set", make_execute_change_set)
