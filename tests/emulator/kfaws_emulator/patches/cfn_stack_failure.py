"""A resource that fails fails its stack, with a per-resource event, instead of hanging.

AWS CreateStack returns the stack id at once; a resource that then fails to
create gets a ``CREATE_FAILED`` event whose ``ResourceStatusReason`` says why,
and the stack rolls back to ``ROLLBACK_COMPLETE`` (``OnFailure=ROLLBACK``, the
default), stays ``CREATE_FAILED`` (``DO_NOTHING`` or ``DisableRollback``) or
is deleted (``DELETE``). A failed update ends in ``UPDATE_ROLLBACK_COMPLETE``
with the stack's previous template, parameters and outputs ("CloudFormation
rolls back the stack to the last known stable state"), and a failed deletion
in ``DELETE_FAILED``, the stack kept.
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateStack.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/stack-failure-options.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/view-stack-events.html

moto 5.2.5 raises the resource's error from CreateStack / ExecuteChangeSet /
DeleteStack themselves, leaves a created stack in ``CREATE_IN_PROGRESS``
forever, drops a stack whose deletion failed, and records no resource
events; a failed update keeps the new template's parameters and outputs in
DescribeStacks; and a failed create's outputs are resolved on every
DescribeStacks, which creates the rolled-back resources they name again and,
where one fails again (a role whose managed policy does not exist), fails
DescribeStacks and DeleteStack themselves (HTTP 500). A stack whose create
failed describes no outputs here, as in AWS (outputs are set once a create
completes). Limits: a failed *update* reports the failure and the
rollback status, and the stack describes its previous template, parameters
and outputs again, but the resources already changed are not reverted;
rollback does not emit per-resource DELETE events.
"""

from __future__ import annotations

from moto.cloudformation import parsing
from moto.cloudformation.parsing import OutputMap
from moto.cloudformation.models import CloudFormationBackend, Event, Stack
from moto.cloudformation.responses import CloudFormationResponse

from ._common import error_text, inside_cloudformation, thread_state, wrap


def _annotate(err: BaseException, logical_id: str, resource_type: str) -> None:
    # The innermost failing resource is the one to blame: a resource whose
    # Ref resolves to a failing one fails through the same exception.
    if not hasattr(err, "kfaws_logical_id"):
        err.kfaws_logical_id = logical_id
        err.kfaws_resource_type = resource_type


def _resource_event(stack: Stack, err: BaseException, status: str) -> str | None:
    logical_id = getattr(err, "kfaws_logical_id", None)
    if logical_id is None:
        return None
    stack.events.append(
        Event(
            stack_id=stack.stack_id,
            stack_name=stack.name,
            logical_resource_id=logical_id,
            physical_resource_id="",
            resource_type=getattr(err, "kfaws_resource_type", None) or "",
            resource_status=status,
            resource_status_reason=error_text(err),
            resource_properties=None,
        )
    )
    return logical_id


def _rollback(stack: Stack) -> bool:
    """Deletes what the failed operation created; False when that failed too."""
    try:
        with inside_cloudformation():
            stack.resource_map.delete()
        return True
    except Exception as err:  # noqa: BLE001 - reported as the stack's state
        _resource_event(stack, err, "DELETE_FAILED")
        return False


def fail_creation(backend: CloudFormationBackend, stack: Stack, err: BaseException, on_failure: str) -> None:
    """Moves a stack whose creation raised ``err`` to the state ``on_failure`` asks for."""
    # No outputs: resolving them would create the resources they name again.
    stack.output_map = OutputMap(stack.resource_map, {"Outputs": {}}, stack.stack_id)
    logical_id = _resource_event(stack, err, "CREATE_FAILED")
    failed = f"The following resource(s) failed to create: [{logical_id}]. " if logical_id else error_text(err)
    if on_failure == "DO_NOTHING":
        stack.status = "CREATE_FAILED"
        stack._add_stack_event("CREATE_FAILED", resource_status_reason=failed)
        return
    stack.status = "ROLLBACK_IN_PROGRESS"
    stack._add_stack_event("ROLLBACK_IN_PROGRESS", resource_status_reason=f"{failed}Rollback requested by user.")
    for name, export in list(backend.exports.items()):
        if export.exporting_stack_id == stack.stack_id:
            del backend.exports[name]
    if not _rollback(stack):
        stack.status = "ROLLBACK_FAILED"
        stack._add_stack_event("ROLLBACK_FAILED")
        return
    stack.status = "ROLLBACK_COMPLETE"
    stack._add_stack_event("ROLLBACK_COMPLETE")
    if on_failure == "DELETE":
        stack._add_stack_event("DELETE_IN_PROGRESS", resource_status_reason="User Initiated")
        stack.status = "DELETE_COMPLETE"
        stack._add_stack_event("DELETE_COMPLETE")
        backend.stacks.pop(stack.stack_id, None)
        backend.deleted_stacks[stack.stack_id] = stack


def snapshot(stack: Stack) -> dict:
    """What a failed update puts back: the stack's template, parameters and tags as described."""
    resources = stack.resource_map
    return {
        "template": stack.template,
        "template_dict": stack.template_dict,
        "parameters": stack.parameters,
        "tags": stack.tags,
        "resources_template": resources._template,
        "resources_json": resources._resource_json_map,
        "input_parameters": dict(resources.input_parameters),
        "resolved_parameters": dict(resources.resolved_parameters),
    }


def _restore(stack: Stack, before: dict) -> None:
    stack.template = before["template"]
    stack.template_dict = before["template_dict"]
    stack.parameters = before["parameters"]
    stack.tags = before["tags"]
    resources = stack.resource_map
    resources._template = before["resources_template"]
    resources._resource_json_map = before["resources_json"]
    resources.input_parameters = before["input_parameters"]
    resources.resolved_parameters = before["resolved_parameters"]
    # Refs to parameters resolve through the parsed resources (moto's load_parameters).
    resources._parsed_resources.update(resources.resolved_parameters)
    stack.output_map = stack._create_output_map()


def fail_update(stack: Stack, err: BaseException, before: dict) -> None:
    """Reports a failed update and describes the stack as it was before it (``before``: :func:`snapshot`)."""
    _restore(stack, before)
    logical_id = _resource_event(stack, err, "UPDATE_FAILED")
    reason = f"The following resource(s) failed to update: [{logical_id}]. " if logical_id else error_text(err)
    stack._add_stack_event("UPDATE_ROLLBACK_IN_PROGRESS", resource_status_reason=reason)
    finish_update_rollback(stack)


def finish_update_rollback(stack: Stack) -> None:
    """Ends an update's rollback: ``UPDATE_ROLLBACK_COMPLETE`` and its stack event.

    Looked up as a module global at call time, so patch
    ``cfn_update_rollback_failed`` can make the rollback fail instead.
    """
    stack._add_stack_event("UPDATE_ROLLBACK_COMPLETE")
    stack.status = "UPDATE_ROLLBACK_COMPLETE"


def apply() -> None:
    def make_parse(original, resource_type_of):
        def parse(logical_id, resource_json, *args, **kwargs):
            try:
                return original(logical_id, resource_json, *args, **kwargs)
            except Exception as err:
                _annotate(err, logical_id, resource_type_of(resource_json))
                raise

        return parse

    resource_type = lambda resource_json: resource_json.get("Type", "")  # noqa: E731
    # Looked up as module globals by ResourceMap at call time.
    wrap(parsing, "parse_and_create_resource", lambda o: make_parse(o, resource_type))
    wrap(parsing, "parse_and_update_resource", lambda o: make_parse(o, resource_type))

    def make_delete_resource(original):
        def _delete_resource(self, parsed_resource, resource_json):
            try:
                return original(self, parsed_resource, resource_json)
            except Exception as err:
                _annotate(err, parsed_resource.logical_resource_id, resource_json.get("Type", ""))
                raise

        return _delete_resource

    wrap(parsing.ResourceMap, "_delete_resource", make_delete_resource)

    def make_create_stack_response(original):
        def create_stack(self):
            state = thread_state()
            disable_rollback = str(self._get_param("DisableRollback", "false")).lower() == "true"
            state.on_failure = "DO_NOTHING" if disable_rollback else (self._get_param("OnFailure") or "ROLLBACK")
            try:
                return original(self)
            finally:
                state.on_failure = None

        return create_stack

    wrap(CloudFormationResponse, "create_stack", make_create_stack_response)

    def make_create_stack(original):
        def create_stack(self, *args, **kwargs):
            before = set(self.stacks)
            try:
                with inside_cloudformation():
                    return original(self, *args, **kwargs)
            except Exception as err:
                created = [self.stacks[i] for i in set(self.stacks) - before]
                if not created:
                    raise  # refused before the stack existed: a synchronous error in AWS too
                fail_creation(self, created[0], err, getattr(thread_state(), "on_failure", None) or "ROLLBACK")
                return created[0]

        return create_stack

    def make_execute_change_set(original):
        def execute_change_set(self, change_set_name, stack_name=None):
            change_set = self.describe_change_set(change_set_name)
            stack = self.stacks[change_set.stack_id]
            creating = change_set.change_set_type == "CREATE"
            before = None if creating else snapshot(stack)
            try:
                with inside_cloudformation():
                    return original(self, change_set_name, stack_name)
            except Exception as err:
                change_set.execution_status = "EXECUTE_FAILED"
                if creating:
                    stack.template = change_set.template
                    fail_creation(self, stack, err, "ROLLBACK")
                else:
                    fail_update(stack, err, before)

        return execute_change_set

    def make_update_stack(original):
        def update_stack(self, name, *args, **kwargs):
            stack = self.get_stack(name)
            before = snapshot(stack)
            try:
                with inside_cloudformation():
                    return original(self, name, *args, **kwargs)
            except Exception as err:
                if not hasattr(err, "kfaws_logical_id"):
                    _restore(stack, before)
                    raise  # a validation error: synchronous in AWS
                fail_update(stack, err, before)
                return stack

        return update_stack

    def make_delete_stack(original):
        def delete_stack(self, name_or_stack_id):
            stack = self.stacks.get(name_or_stack_id) or next(
                (s for s in self.stacks.values() if s.name == name_or_stack_id), None
            )
            if stack is None:
                return original(self, name_or_stack_id)  # AWS: deleting no stack succeeds
            try:
                with inside_cloudformation():
                    return original(self, stack.stack_id)
            except Exception as err:
                # moto removed the stack before it failed; AWS keeps it.
                self.stacks[stack.stack_id] = stack
                logical_id = _resource_event(stack, err, "DELETE_FAILED")
                stack.status = "DELETE_FAILED"
                stack._add_stack_event(
                    "DELETE_FAILED",
                    resource_status_reason=(
                        f"The following resource(s) failed to delete: [{logical_id}]. "
                        if logical_id
                        else error_text(err)
                    ),
                )

        return delete_stack

    wrap(CloudFormationBackend, "create_stack", make_create_stack)
    wrap(CloudFormationBackend, "execute_change_set", make_execute_change_set)
    wrap(CloudFormationBackend, "update_stack", make_update_stack)
    wrap(CloudFormationBackend, "delete_stack", make_delete_stack)
