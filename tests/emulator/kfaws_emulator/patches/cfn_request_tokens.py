"""A DeleteStack that carries the ClientRequestToken of an earlier DeleteStack of the stack is that request again.

AWS: the token identifies one DeleteStack request, so that a client may re-send
the request (to be sure CloudFormation received it) without CloudFormation
taking it for another delete; every event of the operation carries it. A
re-sent request starts nothing: a stack that request left ``DELETE_FAILED``
stays so, and deleting it again takes a request with a token of its own.
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DeleteStack.html

moto 5.2.5 ignores the token: every DeleteStack deletes again.
"""

from __future__ import annotations

from moto.cloudformation.responses import CloudFormationResponse
from moto.core.responses import EmptyResult

from ._common import wrap


def apply() -> None:
    def make_delete_stack(original):
        def delete_stack(self):
            token = self._get_param("ClientRequestToken")
            name = self._get_param("StackName")
            backend = self.cloudformation_backend
            stack = backend.stacks.get(name) or next(
                (s for s in backend.stacks.values() if s.name == name), None
            )
            if token and stack is not None:
                seen = stack.__dict__.setdefault("kfaws_delete_tokens", set())
                if token in seen:
                    return EmptyResult()
                seen.add(token)
            return original(self)

        return delete_stack

    wrap(CloudFormationResponse, "delete_stack", make_delete_stack)
