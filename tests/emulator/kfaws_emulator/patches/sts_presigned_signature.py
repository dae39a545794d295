"""STS checks the SigV4 query-string signature of a presigned request, and serves its signer.

AWS: a presigned request carries its authentication in the query string
(``X-Amz-Algorithm``, ``X-Amz-Credential``, ``X-Amz-Date``,
``X-Amz-SignedHeaders``, ``X-Amz-Signature``). The service recomputes the
signature over the canonical request (method, path, the query without
``X-Amz-Signature``, the signed headers with their values, the payload hash)
with the caller's secret key; a mismatch is ``SignatureDoesNotMatch`` (403).
A request more than 15 minutes older (or newer) than ``X-Amz-Date`` is
refused with ``SignatureDoesNotMatch`` "Signature expired" (403).
https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html#create-canonical-request
https://docs.aws.amazon.com/STS/latest/APIReference/CommonErrors.html
STS answers a valid presigned GetCallerIdentity with the identity of the
credential that signed it: this is how EKS' aws-iam-authenticator turns a
``k8s-aws-v1.`` token into an IAM identity
(https://github.com/kubernetes-sigs/aws-iam-authenticator#how-does-it-work).

The 15-minute window is STS' own: STS does not honour a shorter
``X-Amz-Expires`` (https://github.com/aws/aws-sdk-go/issues/2167), which is
why EKS tokens are built with ``X-Amz-Expires=60`` yet stay valid for 15
minutes.

moto 5.2.5 reads SigV4 only from the ``Authorization`` header: it routes a
presigned request by nothing (so to S3, its default service), verifies no
signature, and takes the caller from that header: a presigned
GetCallerIdentity lists S3 buckets, and once routed to STS it answers the
default identity of the account for any signature, of any age.

The secret key: for keys moto issued (IAM CreateAccessKey, STS AssumeRole...)
the one it issued; for any other key (the 12-digit account keys tests use)
``KFAWS_EMULATOR_SECRET_ACCESS_KEY`` of the emulator's environment, default
``test`` (what ``with_emulator.sh`` gives the commands it runs). Requests
signed in the ``Authorization`` header are not checked (no test needs it).
"""

from __future__ import annotations

import datetime as dt
import hmac
import os
import urllib.parse

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from moto.iam.models import get_account_id_from, iam_backends
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.sts.responses import TokenResponse
from moto.utilities.utils import PARTITION_NAMES

from ..faults import render_error
from ..operations import ACCOUNT_ID
from ._common import wrap

SECRET_ENV = "KFAWS_EMULATOR_SECRET_ACCESS_KEY"
DEFAULT_SECRET = "test"
WINDOW = dt.timedelta(minutes=15)
_AMZ_DATE = "%Y%m%dT%H%M%SZ"
_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
)


class Refused(Exception):
    """The presigned request is refused with ``code`` (HTTP 403)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _secret(access_key: str) -> str:
    for account in ([access_key] if ACCOUNT_ID.match(access_key) else [get_account_id_from(access_key)]):
        for partition in PARTITION_NAMES:
            key = iam_backends[account][partition].access_keys.get(access_key)
            if key is not None:
                return key.secret_access_key
    return os.environ.get(SECRET_ENV, DEFAULT_SECRET)


def verify(method: str, url: str, headers, query: dict[str, list[str]], now: dt.datetime) -> str:
    """Checks a presigned request; returns its access key id or raises Refused.

    ``url`` is scheme, host and path (no query); ``headers`` a case-insensitive
    mapping of the request's headers; ``query`` the decoded query string.
    """
    for name, values in query.items():
        if len(values) != 1:
            raise Refused("InvalidParameterValue", f"query parameter {name} is given {len(values)} times")
    params = {name: values[0] for name, values in query.items()}
    missing = [
        p
        for p in ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders", "X-Amz-Signature")
        if p not in params
    ]
    if missing:
        raise Refused("IncompleteSignature", f"the presigned request lacks {', '.join(missing)}")
    if params["X-Amz-Algorithm"] != "AWS4-HMAC-SHA256":
        raise Refused("IncompleteSignature", f"unsupported X-Amz-Algorithm {params['X-Amz-Algorithm']!r}")
    scope = params["X-Amz-Credential"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        raise Refused("IncompleteSignature", "X-Amz-Credential must be KEY/yyyymmdd/region/service/aws4_request")
    access_key, day, region, service, _ = scope
    try:
        signed_at = dt.datetime.strptime(params["X-Amz-Date"], _AMZ_DATE).replace(tzinfo=dt.timezone.utc)
    except ValueError:
        raise Refused("IncompleteSignature", "X-Amz-Date must be yyyymmddTHHMMSSZ") from None
    stamp = now.strftime(_AMZ_DATE)
    if now - signed_at > WINDOW:
        raise Refused(
            "SignatureDoesNotMatch",
            f"Signature expired: {params['X-Amz-Date']} is now earlier than "
            f"{(now - WINDOW).strftime(_AMZ_DATE)} ({stamp} - 15 min.)",
        )
    if signed_at - now > WINDOW:
        raise Refused(
            "SignatureDoesNotMatch",
            f"Signature not yet current: {params['X-Amz-Date']} is still later than "
            f"{(now + WINDOW).strftime(_AMZ_DATE)} ({stamp} + 15 min.)",
        )
    signature = params.pop("X-Amz-Signature")
    signed = {}
    for name in params["X-Amz-SignedHeaders"].split(";"):
        value = headers.get(name)
        if value is None:
            raise Refused("SignatureDoesNotMatch", f"signed header {name!r} is not in the request")
        signed[name] = value
    request = AWSRequest(method=method, url=url, headers=signed, params=params)
    request.context["timestamp"] = params["X-Amz-Date"]
    signer = SigV4Auth(Credentials(access_key, _secret(access_key)), service, region)
    if day != params["X-Amz-Date"][:8]:
        raise Refused("SignatureDoesNotMatch", _MISMATCH)
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    if not hmac.compare_digest(expected, signature):
        raise Refused("SignatureDoesNotMatch", _MISMATCH)
    return access_key


def apply() -> None:
    def make_infer(original):
        def infer_service_region_host(self, environ, path):
            if "HTTP_AUTHORIZATION" not in environ:
                query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
                credential = query.get("X-Amz-Credential", [""])[0]
                if credential.count("/") == 4:
                    # Routing only: moto infers the service and region from a
                    # SigV4 Authorization header's credential scope.
                    environ = {**environ, "HTTP_AUTHORIZATION": f"AWS4-HMAC-SHA256 Credential={credential}, x"}
            return original(self, environ, path)

        return infer_service_region_host

    def make_call_action(original):
        def call_action(self):
            if "X-Amz-Signature" not in self.querystring:
                return original(self)
            url = f"{self.headers.get('X-Forwarded-Proto', 'http')}://{self.headers.get('Host', '')}{self.path}"
            try:
                access_key = verify(
                    self.method, url, self.headers, self.querystring, dt.datetime.now(dt.timezone.utc)
                )
            except Refused as refused:
                status, headers, body = render_error("query", "server_error", refused.code, 403, refused.message)
                return status, dict(headers), body.decode()
            # moto reads the caller from the Authorization header or the
            # (SigV2) AWSAccessKeyId parameter only: hand it the signer.
            self.querystring["AWSAccessKeyId"] = [access_key]
            if "x-moto-account-id" not in self.headers and "MOTO_ACCOUNT_ID" not in os.environ:
                self.current_account = self.get_current_account()
            return original(self)

        return call_action

    wrap(DomainDispatcherApplication, "infer_service_region_host", make_infer)
    wrap(TokenResponse, "call_action", make_call_action)
