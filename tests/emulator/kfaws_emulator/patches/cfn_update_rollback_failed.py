"""A failed update's rollback can fail (``UPDATE_ROLLBACK_FAILED``), and ContinueUpdateRollback resumes it.

AWS: when CloudFormation cannot roll a resource back after a failed update,
the resource gets an ``UPDATE_FAILED`` event and the stack ends in
``UPDATE_ROLLBACK_FAILED`` ("The following resource(s) failed to update:
[X]. "). Such a stack can not be updated ("Stack:<id> is in
UPDATE_ROLLBACK_FAILED state and can not be updated.") but can be deleted;
ContinueUpdateRollback retries the rollback, optionally skipping resources
named in ``ResourcesToSkip`` (only resources in ``UPDATE_FAILED`` from the
failed rollback; CloudFormation marks each ``UPDATE_COMPLETE``, "Resource
skipped during UpdateRollback"), and ends in ``UPDATE_ROLLBACK_COMPLETE``, or
in ``UPDATE_ROLLBACK_FAILED`` again if a resource still fails. A retried call
carrying the same ``ClientRequestToken`` is the same request.
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ContinueUpdateRollback.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-continueupdaterollback.html

moto 5.2.5 never fails a rollback (with ``cfn_stack_failure`` every failed
update ends ``UPDATE_ROLLBACK_COMPLETE``), has no ContinueUpdateRollback, and
refuses UpdateStack only in ``ROLLBACK_COMPLETE``.

Here a rollback fails when a rule of ``POST /_kfaws/cfn/rollback-failures``
matches the stack (name, and account if the rule names one) and has count
left: the rule's ``logical_id`` gets the ``UPDATE_FAILED`` event with the
rule's ``reason``. Each failed rollback takes one from the rule's ``count``
(``null``: forever) and adds one to ``fired``. Limits: the resource named by
the rule need not exist in the stack; DescribeStackResources does not show it
``UPDATE_FAILED``; the wording of ContinueUpdateRollback's own validation
errors (wrong state, bad ``ResourcesToSkip`` entry) is ours, AWS's is not
documented.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import asdict, dataclass

from moto.cloudformation.exceptions import ValidationError
from moto.cloudformation.models import CloudFormationBackend, Event, Stack
from moto.cloudformation.responses import CloudFormationResponse
from moto.core.responses import EmptyResult

from ..faults import RuleError
from ..lifecycle import LIFECYCLE
from ..operations import ACCOUNT_ID
from . import cfn_stack_failure
from ._common import wrap
from .lifecycle_stacks import _hold

FAILED = "UPDATE_ROLLBACK_FAILED"
DEFAULT_REASON = "Injected by the kfaws emulator: the resource cannot be rolled back"
SKIPPED_REASON = "Resource skipped during UpdateRollback"
CONTINUE_REASON = "Continue rollback requested by user."


@dataclass
class RollbackFailure:
    """One rule: the next ``count`` rollbacks of stack ``stack_name`` fail on ``logical_id``."""

    stack_name: str
    logical_id: str
    reason: str = DEFAULT_REASON
    count: int | None = 1
    account_id: str | None = None
    id: int = 0
    fired: int = 0

    @classmethod
    def from_json(cls, data, rule_id: int) -> "RollbackFailure":
        """Validates a rule; raises RuleError naming the field and the rule."""
        if not isinstance(data, dict):
            raise RuleError("a rollback-failure rule must be a JSON object")
        known = {f for f in cls.__dataclass_fields__ if f not in ("id", "fired")}
        unknown = set(data) - known
        if unknown:
            raise RuleError(f"unknown field(s) {sorted(unknown)}; allowed: {sorted(known)}")
        for required in ("stack_name", "logical_id"):
            if not isinstance(data.get(required), str) or not data[required]:
                raise RuleError(f"field {required!r} is required and must be a non-empty string")
        rule = cls(**data, id=rule_id)
        if not isinstance(rule.reason, str) or not rule.reason:
            raise RuleError("field 'reason' must be a non-empty string")
        if rule.count is not None and (
            not isinstance(rule.count, int) or isinstance(rule.count, bool) or rule.count < 1
        ):
            raise RuleError("field 'count' must be a positive integer or null (every rollback fails)")
        if rule.account_id is not None and not (isinstance(rule.account_id, str) and ACCOUNT_ID.match(rule.account_id)):
            raise RuleError("field 'account_id' must be a 12-digit AWS account id")
        return rule


_lock = threading.Lock()
_rules: list[RollbackFailure] = []
_ids = itertools.count(1)


def add(data) -> dict:
    """Adds a rule (``POST /_kfaws/cfn/rollback-failures``); answers it with ``id`` and ``fired``."""
    with _lock:
        rule = RollbackFailure.from_json(data, next(_ids))
        _rules.append(rule)
        return asdict(rule)


def rules() -> list[dict]:
    """The rules, with ``count`` left and ``fired``."""
    with _lock:
        return [asdict(r) for r in _rules]


def clear(account_id: str | None = None) -> int:
    """Removes every rule, or those naming ``account_id``; answers how many went."""
    with _lock:
        before = len(_rules)
        _rules[:] = [r for r in _rules if account_id is not None and r.account_id != account_id]
        return before - len(_rules)


def reset() -> None:
    clear()


def _take(stack: Stack, skip) -> RollbackFailure | None:
    """The first rule that fails this rollback of ``stack``, its count taken; None if none does."""
    with _lock:
        for rule in _rules:
            if (
                rule.stack_name == stack.name
                and rule.account_id in (None, stack.account_id)
                and (rule.count is None or rule.count > 0)
                and rule.logical_id not in skip
            ):
                if rule.count is not None:
                    rule.count -= 1
                rule.fired += 1
                return RollbackFailure(**asdict(rule))
    return None


def _resource_event(stack: Stack, logical_id: str, status: str, reason: str) -> None:
    resources = stack.resource_map
    resource_type = (resources._resource_json_map.get(logical_id) or {}).get("Type", "")
    parsed = resources._parsed_resources.get(logical_id)
    physical = ""
    if parsed is not None and not isinstance(parsed, (str, dict, list)):
        try:
            physical = parsed.physical_resource_id or ""
        except Exception:  # noqa: BLE001 - some moto models compute it lazily
            physical = ""
    stack.events.append(
        Event(
            stack_id=stack.stack_id,
            stack_name=stack.name,
            logical_resource_id=logical_id,
            physical_resource_id=physical,
            resource_type=resource_type,
            resource_status=status,
            resource_status_reason=reason,
            resource_properties=None,
        )
    )


def _finish(original):
    def finish_update_rollback(stack: Stack, skip=()) -> None:
        """Fails the rollback if a rule says so; else marks ``skip`` skipped and completes it."""
        rule = _take(stack, skip)
        if rule is not None:
            _resource_event(stack, rule.logical_id, "UPDATE_FAILED", rule.reason)
            stack._add_stack_event(
                FAILED,
                resource_status_reason=f"The following resource(s) failed to update: [{rule.logical_id}]. ",
            )
            stack.status = FAILED
            stack.kfaws_rollback_failed = [rule.logical_id]
            return
        for logical_id in skip:
            _resource_event(stack, logical_id, "UPDATE_COMPLETE", SKIPPED_REASON)
        stack.kfaws_rollback_failed = []
        original(stack)

    return finish_update_rollback


def _live_stack(backend: CloudFormationBackend, name_or_id: str | None) -> Stack | None:
    return backend.stacks.get(name_or_id) or next(
        (s for s in backend.stacks.values() if s.name == name_or_id), None
    )


def _refuse_update(stack: Stack | None) -> None:
    if stack is not None and stack.status == FAILED:
        raise ValidationError(message=f"Stack:{stack.stack_id} is in {FAILED} state and can not be updated.")


def continue_update_rollback(self: CloudFormationResponse) -> EmptyResult:
    """ContinueUpdateRollback (StackName: name or id, ResourcesToSkip, ClientRequestToken).

    Errors (ValidationError): "Stack with id X does not exist" (AWS's wording);
    "Stack <name> is in <status> state and cannot continue update rollback" and
    "ResourcesToSkip: ..." naming the entry (our wording). A call whose token an
    earlier accepted call of the stack carried does nothing and succeeds.
    """
    name = self._get_param("StackName")
    skip = list(self._get_param("ResourcesToSkip", []) or [])
    token = self._get_param("ClientRequestToken")
    backend = self.cloudformation_backend
    stack = _live_stack(backend, name)
    if stack is None:
        raise ValidationError(name)
    tokens = stack.__dict__.setdefault("kfaws_continue_tokens", set())
    if token and token in tokens:
        return EmptyResult()
    if stack.status != FAILED:
        raise ValidationError(
            message=f"Stack {stack.name} is in {stack.status} state and cannot continue update rollback"
        )
    failed = list(getattr(stack, "kfaws_rollback_failed", []))
    for logical_id in skip:
        if logical_id not in failed:
            raise ValidationError(
                message=(
                    f"ResourcesToSkip: {logical_id} is not a resource of stack {stack.name} in UPDATE_FAILED "
                    f"state from the failed rollback; only {failed} can be skipped"
                )
            )
    if token:
        tokens.add(token)
    before = len(stack.events)
    stack._add_stack_event("UPDATE_ROLLBACK_IN_PROGRESS", resource_status_reason=CONTINUE_REASON)
    cfn_stack_failure.finish_update_rollback(stack, skip=skip)
    seconds = LIFECYCLE.duration("cloudformation.stack.update", backend.account_id)
    if seconds > 0:
        _hold(stack, "UPDATE_ROLLBACK_IN_PROGRESS", seconds, keep=before + 1)
    return EmptyResult()


def apply() -> None:
    # cfn_stack_failure.fail_update calls it as a module global.
    wrap(cfn_stack_failure, "finish_update_rollback", _finish)

    def make_update_stack(original):
        def update_stack(self):
            _refuse_update(_live_stack(self.cloudformation_backend, self._get_param("StackName")))
            return original(self)

        return update_stack

    def make_create_change_set(original):
        def create_change_set(self):
            # AWS's default ChangeSetType is UPDATE (moto's is CREATE).
            if self._get_param("ChangeSetType") != "CREATE":
                _refuse_update(_live_stack(self.cloudformation_backend, self._get_param("StackName")))
            return original(self)

        return create_change_set

    def make_execute_change_set(original):
        def execute_change_set(self):
            backend = self.cloudformation_backend
            name = self._get_param("ChangeSetName")
            stack_name = self._get_param("StackName")
            change_set = next(
                (
                    cs
                    for arn, cs in backend.change_sets.items()
                    if name in (arn, cs.change_set_name)
                    and (stack_name is None or stack_name in (cs.stack_name, cs.stack_id))
                ),
                None,
            )
            if change_set is not None:
                _refuse_update(backend.stacks.get(change_set.stack_id))
            return original(self)

        return execute_change_set

    wrap(CloudFormationResponse, "update_stack", make_update_stack)
    wrap(CloudFormationResponse, "create_change_set", make_create_change_set)
    wrap(CloudFormationResponse, "execute_change_set", make_execute_change_set)
    CloudFormationResponse.continue_update_rollback = continue_update_rollback
