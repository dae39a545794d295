"""CloudFormation stacks pass through *_IN_PROGRESS for the configured time.

AWS: a stack is CREATE_IN_PROGRESS / UPDATE_IN_PROGRESS / DELETE_IN_PROGRESS
while its resources change, and reaches its final status (and that status's
stack event) only when they are done; clients poll DescribeStacks.
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_Stack.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-describing-stacks.html

moto 5.2.5 finishes every stack operation inside the API call. Here moto
still does the work at once (so the resources exist while the stack is in
progress, as they do part-way through in AWS), but the stack shows its
in-progress status, and holds back its later events, for
``cloudformation.stack.create|update|delete`` seconds.
"""

from __future__ import annotations

from moto.cloudformation.models import CloudFormationBackend
from moto.core.utils import utcnow

from ..lifecycle import LIFECYCLE
from ._common import wrap


def _hold(stack, transitional: str, seconds: float, keep: int) -> None:
    """Shows ``transitional`` and the first ``keep`` events for ``seconds``, then the real outcome."""
    final = stack.status
    hidden = stack.events[keep:]
    del stack.events[keep:]
    stack.status = transitional

    def finish():
        if stack.status != transitional:
            return  # something else (a deletion) has moved the stack on
        for event in hidden:
            event.timestamp = utcnow()
        stack.events.extend(hidden)
        stack.status = final

    LIFECYCLE.schedule(seconds, finish)


def apply() -> None:
    def make_create_stack(original):
        def create_stack(self, *args, **kwargs):
            stack = original(self, *args, **kwargs)
            seconds = LIFECYCLE.duration("cloudformation.stack.create", self.account_id)
            if seconds > 0:
                _hold(stack, "CREATE_IN_PROGRESS", seconds, keep=1)
            return stack

        return create_stack

    def make_execute_change_set(original):
        def execute_change_set(self, change_set_name, stack_name=None):
            change_set = self.describe_change_set(change_set_name)
            stack = self.stacks[change_set.stack_id]
            before = len(stack.events)
            result = original(self, change_set_name, stack_name)
            kind = "create" if change_set.change_set_type == "CREATE" else "update"
            seconds = LIFECYCLE.duration(f"cloudformation.stack.{kind}", self.account_id)
            if seconds > 0:
                _hold(stack, f"{kind.upper()}_IN_PROGRESS", seconds, keep=before + 1)
            return result

        return execute_change_set

    def make_update_stack(original):
        def update_stack(self, name, *args, **kwargs):
            stack = self.get_stack(name)
            before = len(stack.events)
            result = original(self, name, *args, **kwargs)
            seconds = LIFECYCLE.duration("cloudformation.stack.update", self.account_id)
            if seconds > 0:
                _hold(stack, "UPDATE_IN_PROGRESS", seconds, keep=before + 1)
            return result

        return update_stack

    def make_delete_stack(original):
        def delete_stack(self, name_or_stack_id):
            stack = self.stacks.get(name_or_stack_id) or next(
                (s for s in self.stacks.values() if s.name == name_or_stack_id), None
            )
            seconds = LIFECYCLE.duration("cloudformation.stack.delete", self.account_id)
            if stack is None or seconds <= 0:
                return original(self, name_or_stack_id)
            if stack.status == "DELETE_IN_PROGRESS":
                return None
            stack.status = "DELETE_IN_PROGRESS"
            stack._add_stack_event("DELETE_IN_PROGRESS", resource_status_reason="User Initiated")
            announced = stack.events[-1]

            def finish():
                if self.stacks.get(stack.stack_id) is stack:
                    # moto's own deletion records DELETE_IN_PROGRESS again.
                    stack.events.remove(announced)
                    original(self, stack.stack_id)

            LIFECYCLE.schedule(seconds, finish)
            return None

        return delete_stack

    wrap(CloudFormationBackend, "create_stack", make_create_stack)
    wrap(CloudFormationBackend, "execute_change_set", make_execute_change_set)
    wrap(CloudFormationBackend, "update_stack", make_update_stack)
    wrap(CloudFormationBackend, "delete_stack", make_delete_stack)
