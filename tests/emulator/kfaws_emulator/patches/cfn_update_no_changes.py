"""UpdateStack with the stack's own template, parameters and tags is refused.

AWS answers ValidationError "No updates are to be performed." and leaves the
stack as it was.
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_UpdateStack.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/troubleshooting.html

moto 5.2.5 "updates" anyway and reports UPDATE_COMPLETE.
"""

from __future__ import annotations

from moto.cloudformation.exceptions import ValidationError
from moto.cloudformation.models import CloudFormationBackend

from ._common import wrap


def apply() -> None:
    def make_update_stack(original):
        def update_stack(self, name, template, role_arn, parameters, tags):
            stack = self.get_stack(name)
            resolved = self._resolve_update_parameters(instance=stack, incoming_params=parameters)
            if (
                stack.has_template(template)
                and stack.has_parameters(resolved)
                and (tags is None or tags == stack.tags)
            ):
                raise ValidationError(message="No updates are to be performed.")
            return original(self, name, template, role_arn, parameters, tags)

        return update_stack

    wrap(CloudFormationBackend, "update_stack", make_update_stack)
