"""ECR GetAuthorizationToken answers credentials a real registry accepts.

AWS GetAuthorizationToken: ``authorizationData`` holds, per registry,
``authorizationToken`` (base64 of ``user:password``; "decode it and use it in
a docker login command", the user being ``AWS``), ``proxyEndpoint`` (the
registry URL, ``https://ACCOUNT.dkr.ecr.REGION.amazonaws.com``) and
``expiresAt``; the token is valid for 12 hours.
https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_GetAuthorizationToken.html
https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_AuthorizationData.html
https://docs.aws.amazon.com/AmazonECR/latest/userguide/registry_auth.html

moto 5.2.5 answers ``base64("AWS:<account>-auth-token")``, an endpoint on
which nothing listens, and ``expiresAt`` 2015-01-01 (long expired). This
patch answers the emulator's loopback registry (``registry.py``): its URL as
``proxyEndpoint`` and ``base64("AWS:" + its password)``, expiring 12 hours
from now. A client that pushes with these credentials to the endpoint (as
``docker login`` and ``kfaws image push`` do) reaches a real Docker Registry
HTTP API V2. Repository URIs stay the real form
``ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME`` (the registry's names are the
repository names). Without ``docker-registry`` installed, moto's own answer
is kept, with the 12-hour expiry.
"""

from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone

from moto.core.responses import ActionResult
from moto.ecr.responses import ECRResponse

from .. import registry
from ._common import wrap

VALIDITY = timedelta(hours=12)


def answer(original_data: list[dict]) -> list[dict]:
    """``authorizationData`` with the registry's credentials and endpoint, expiring in 12 hours."""
    reg = registry.current()
    expires = datetime.now(timezone.utc) + VALIDITY
    out = []
    for entry in original_data:
        entry = dict(entry, expiresAt=expires)
        if reg is not None:
            token = base64.b64encode(f"{reg.username}:{reg.password}".encode()).decode()
            entry.update(authorizationToken=token, proxyEndpoint=reg.url)
        out.append(entry)
    return out


def apply() -> None:
    def make(original):
        def get_authorization_token(self):
            result = original(self)
            data = result.result if isinstance(result, ActionResult) else None
            if isinstance(data, dict) and "authorizationData" in data:
                return ActionResult({**data, "authorizationData": answer(data["authorizationData"])})
            return result

        return get_authorization_token

    wrap(ECRResponse, "get_authorization_token", make)
