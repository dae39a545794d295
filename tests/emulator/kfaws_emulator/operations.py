"""Names the AWS service, operation and wire protocol of an incoming request.

Fault rules and the call log are keyed by (service, operation), so the
emulator has to recover them from the raw HTTP request the way an AWS
front end would: the SigV4 credential scope names the service's signing
name, and the operation comes from the protocol's own carrier:

* ``query`` / ``ec2``: the ``Action`` parameter (query string or form body),
* ``json``: the ``X-Amz-Target`` header (``Prefix.Operation``),
* ``rest-json`` / ``rest-xml``: the HTTP method and the path, matched against
  the ``requestUri`` templates of botocore's service model.

Protocols are those of botocore's service models (the Smithy AWS protocols,
https://smithy.io/2.0/aws/protocols/index.html).
"""

from __future__ import annotations

import functools
import re
import urllib.parse
from dataclasses import dataclass

import botocore.session
from botocore.exceptions import UnknownServiceError

# SigV4 signing names that differ from botocore's service names, limited to
# the services kfaws calls or may call.
_SIGNING_TO_SERVICE = {
    "elasticfilesystem": "efs",
    "monitoring": "cloudwatch",
    "execute-api": "apigateway",
}

ACCOUNT_ID = re.compile(r"^\d{12}$")
"""An AWS account id: 12 digits."""

_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/\d{8}/([^/]+)/([^/]+)/aws4_request")


@dataclass(frozen=True)
class Operation:
    """One request's identity: who (account), what (service, operation), how (protocol)."""

    service: str
    operation: str
    protocol: str
    access_key: str | None


def canonical_service(name: str) -> str:
    """Maps a signing name (``elasticfilesystem``) or a service name (``efs``) to botocore's name."""
    return _SIGNING_TO_SERVICE.get(name.lower(), name.lower())


@functools.lru_cache(maxsize=None)
def _session() -> botocore.session.Session:
    return botocore.session.get_session()


@functools.lru_cache(maxsize=None)
def _model(service: str):
    try:
        return _session().get_service_model(service)
    except UnknownServiceError:
        return None


@functools.lru_cache(maxsize=None)
def _required_headers(operation) -> frozenset:
    """Lower-case names of the headers an operation's input requires: they tell
    apart operations of one method and path (S3 ``CopyObject`` is ``PutObject``'s
    ``PUT /{Bucket}/{Key+}`` with ``x-amz-copy-source``)."""
    shape = operation.input_shape
    if shape is None:
        return frozenset()
    required = set(shape.required_members)
    return frozenset(
        member.serialization["name"].lower()
        for name, member in shape.members.items()
        if name in required and member.serialization.get("location") == "header"
    )


def _rest_routes(service: str) -> list[tuple[str, re.Pattern, frozenset, frozenset, int, str]]:
    """(method, path regex, required query keys, required headers, specificity, operation)
    for a REST service."""
    model = _model(service)
    routes = []
    for name in model.operation_names:
        operation = model.operation_model(name)
        http = operation.http
        headers = _required_headers(operation)
        uri = http.get("requestUri", "/")
        path, _, query = uri.partition("?")
        keys = frozenset(k.split("=")[0] for k in query.split("&") if k)
        pattern = ""
        literal = 0
        for part in re.split(r"(\{[^}]+\})", path):
            if part.startswith("{"):
                pattern += ".+" if part.endswith("+}") else "[^/]+"
            else:
                pattern += re.escape(part)
                literal += len(part)
        specificity = literal + 100 * (len(keys) + len(headers))
        routes.append((http.get("method", "POST"), re.compile(f"^{pattern}/?$"), keys, headers, specificity, name))
    return routes


def _match_rest(service: str, method: str, path: str, query_keys: set[str], header_names: set[str]) -> str:
    best: tuple[int, str] | None = None
    for route_method, regex, keys, headers, specificity, name in _rest_routes(service):
        if route_method == method and regex.match(path) and keys <= query_keys and headers <= header_names:
            if best is None or specificity > best[0]:
                best = (specificity, name)
    return best[1] if best else "Unknown"


def identify(environ: dict, body: bytes) -> Operation:
    """Identifies the request described by a WSGI ``environ`` and its already-read ``body``."""
    auth = environ.get("HTTP_AUTHORIZATION", "")
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    match = _CREDENTIAL.search(auth)
    if match:
        access_key, signing_name = match.group(1), match.group(3)
    elif "X-Amz-Credential" in query:  # presigned URL
        parts = query["X-Amz-Credential"][0].split("/")
        access_key, signing_name = parts[0], (parts[3] if len(parts) > 3 else "unknown")
    else:
        access_key, signing_name = None, "unknown"
    service = canonical_service(signing_name)
    model = _model(service)
    default_protocol = model.metadata.get("protocol", "query") if model else "query"

    target = environ.get("HTTP_X_AMZ_TARGET")
    if target:
        return Operation(service, target.rsplit(".", 1)[-1], "json", access_key)
    action = query.get("Action", [None])[0]
    if action is None and b"Action=" in body:
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
        action = form.get("Action", [None])[0]
    if action:
        protocol = default_protocol if default_protocol in ("query", "ec2") else "query"
        return Operation(service, action, protocol, access_key)
    if model and default_protocol in ("rest-json", "rest-xml"):
        header_names = {k[5:].replace("_", "-").lower() for k in environ if k.startswith("HTTP_")}
        header_names |= {k.replace("_", "-").lower() for k in ("CONTENT_TYPE", "CONTENT_LENGTH") if environ.get(k)}
        method = environ.get("REQUEST_METHOD", "GET")
        # A label's value may hold an encoded "/" (EKS's principalArn in
        # /clusters/{name}/access-entries/{principalArn}): matched on the path
        # as sent (werkzeug's RAW_URI) it stays one segment; decoded, it would
        # split into several and match no route.
        raw = (environ.get("RAW_URI") or environ.get("REQUEST_URI") or "").split("?", 1)[0]
        operation = _match_rest(service, method, raw, set(query), header_names) if raw else "Unknown"
        if operation == "Unknown":
            path = urllib.parse.unquote(environ.get("PATH_INFO", "/"))
            operation = _match_rest(service, method, path, set(query), header_names)
        return Operation(service, operation, default_protocol, access_key)
    return Operation(service, "Unknown", default_protocol, access_key)
