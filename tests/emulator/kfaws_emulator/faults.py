"""Fault rules: throttling errors, server errors and added latency per service and operation.

A rule matches a request by service (botocore name, or its SigV4 signing
name), operation (``*`` for any) and optionally account; it fires on a
matching call with ``probability`` until it has fired ``count`` times
(``None``: forever). Errors are rendered in the wire shape of the request's
protocol so that an AWS SDK parses and classifies them exactly as it would a
real one (retryable throttling vs. transient 5xx):

* query (IAM, STS, CloudFormation): ``<ErrorResponse><Error><Type/><Code/><Message/></Error><RequestId/>``
  -- https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/CommonErrors.html
* ec2: ``<Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>``,
  throttling is ``RequestLimitExceeded`` -- https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
* json / rest-json (EKS, EFS): ``x-amzn-ErrorType`` header plus ``{"__type", "message"}`` body
  -- https://smithy.io/2.0/aws/protocols/aws-restjson1-protocol.html#operation-error-serialization
* rest-xml (S3): ``<Error><Code/><Message/><RequestId/></Error>``, throttling is ``SlowDown`` (503)
  -- https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import uuid
from dataclasses import asdict, dataclass, field
from xml.sax.saxutils import escape

from .operations import ACCOUNT_ID, Operation, canonical_service

KINDS = ("throttle", "server_error", "latency")

# (code, HTTP status) per protocol and kind, from the references above.
_DEFAULTS = {
    ("query", "throttle"): ("Throttling", 400),
    ("query", "server_error"): ("InternalFailure", 500),
    ("ec2", "throttle"): ("RequestLimitExceeded", 503),
    ("ec2", "server_error"): ("InternalError", 500),
    ("json", "throttle"): ("ThrottlingException", 400),
    ("json", "server_error"): ("InternalFailure", 500),
    ("rest-json", "throttle"): ("ThrottlingException", 429),
    ("rest-json", "server_error"): ("InternalFailure", 500),
    ("rest-xml", "throttle"): ("SlowDown", 503),
    ("rest-xml", "server_error"): ("InternalError", 500),
}


class RuleError(ValueError):
    """A fault rule that was rejected; the message names the field and the rule."""


@dataclass
class Rule:
    """One fault rule; see the module documentation for the matching semantics."""

    service: str
    operation: str
    kind: str
    count: int | None = 1
    probability: float = 1.0
    latency_ms: int = 0
    account_id: str | None = None
    code: str | None = None
    status: int | None = None
    message: str = "Injected by the kfaws emulator"
    id: int = 0
    fired: int = 0
    seen: int = 0

    @classmethod
    def from_json(cls, data: dict, rule_id: int) -> "Rule":
        if not isinstance(data, dict):
            raise RuleError("a fault rule must be a JSON object")
        known = {f for f in cls.__dataclass_fields__ if f not in ("id", "fired", "seen")}
        unknown = set(data) - known
        if unknown:
            raise RuleError(f"unknown field(s) {sorted(unknown)}; allowed: {sorted(known)}")
        for required in ("service", "operation", "kind"):
            if not isinstance(data.get(required), str) or not data[required]:
                raise RuleError(f"field {required!r} is required and must be a non-empty string")
        rule = cls(**data, id=rule_id)
        if rule.kind not in KINDS:
            raise RuleError(f"field 'kind' must be one of {list(KINDS)}, got {rule.kind!r}")
        if rule.count is not None and (not isinstance(rule.count, int) or rule.count < 1):
            raise RuleError("field 'count' must be a positive integer or null (unlimited)")
        if not isinstance(rule.probability, (int, float)) or not 0 < rule.probability <= 1:
            raise RuleError("field 'probability' must be in (0, 1]")
        if not isinstance(rule.latency_ms, int) or rule.latency_ms < 0:
            raise RuleError("field 'latency_ms' must be a non-negative integer (milliseconds)")
        if rule.kind == "latency" and rule.latency_ms == 0:
            raise RuleError("a 'latency' rule needs 'latency_ms' > 0")
        if rule.account_id is not None and not (isinstance(rule.account_id, str) and ACCOUNT_ID.match(rule.account_id)):
            raise RuleError("field 'account_id' must be a 12-digit AWS account id")
        if rule.status is not None and not (isinstance(rule.status, int) and 400 <= rule.status <= 599):
            raise RuleError("field 'status' must be an HTTP error status 400-599")
        rule.service = canonical_service(rule.service)
        return rule

    def matches(self, op: Operation, account_id: str) -> bool:
        return (
            self.service == op.service
            and self.operation in ("*", op.operation)
            and self.account_id in (None, account_id)
            and (self.count is None or self.fired < self.count)
        )


@dataclass
class Decision:
    """What to do with one request: sleep first, then maybe answer with an error instead of moto."""

    latency_s: float = 0.0
    error: tuple[int, list[tuple[str, str]], bytes] | None = None
    rule_ids: list[int] = field(default_factory=list)


class FaultRules:
    """The thread-safe set of active rules."""

    def __init__(self, seed: int | None = None) -> None:
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._ids = itertools.count(1)
        self._random = random.Random(seed)

    def add(self, data: dict) -> Rule:
        with self._lock:
            rule = Rule.from_json(data, next(self._ids))
            self._rules.append(rule)
            return rule

    def list(self) -> list[dict]:
        with self._lock:
            return [asdict(r) for r in self._rules]

    def clear(self, account_id: str | None = None) -> int:
        with self._lock:
            before = len(self._rules)
            self._rules = [r for r in self._rules if account_id is not None and r.account_id != account_id]
            return before - len(self._rules)

    def reseed(self, seed: int | None) -> None:
        with self._lock:
            self._random = random.Random(seed)

    def decide(self, op: Operation, account_id: str) -> Decision:
        decision = Decision()
        with self._lock:
            for rule in self._rules:
                if not rule.matches(op, account_id):
                    continue
                rule.seen += 1
                if self._random.random() >= rule.probability:
                    continue
                if rule.kind == "latency":
                    rule.fired += 1
                    decision.latency_s += rule.latency_ms / 1000
                    decision.rule_ids.append(rule.id)
                elif decision.error is None:
                    rule.fired += 1
                    decision.latency_s += rule.latency_ms / 1000
                    decision.error = render_error(op.protocol, rule.kind, rule.code, rule.status, rule.message)
                    decision.rule_ids.append(rule.id)
        return decision


def render_error(protocol: str, kind: str, code: str | None, status: int | None, message: str):
    """(HTTP status, headers, body) of an AWS error in ``protocol``'s wire shape."""
    default_code, default_status = _DEFAULTS.get((protocol, kind), _DEFAULTS[("query", kind)])
    code = code or default_code
    status = status or default_status
    request_id = str(uuid.uuid4())
    headers = [("x-amzn-RequestId", request_id)]
    if protocol in ("json", "rest-json"):
        headers += [("Content-Type", "application/json"), ("x-amzn-ErrorType", code)]
        body = json.dumps({"__type": code, "message": message}).encode()
    elif protocol == "ec2":
        headers.append(("Content-Type", "text/xml"))
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
            f"<Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
            f"</Error></Errors><RequestID>{request_id}</RequestID></Response>"
        ).encode()
    elif protocol == "rest-xml":
        headers.append(("Content-Type", "application/xml"))
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
            f"<RequestId>{request_id}</RequestId></Error>"
        ).encode()
    else:
        headers.append(("Content-Type", "text/xml"))
        fault_type = "Sender" if status < 500 else "Receiver"
        body = (
            "<ErrorResponse><Error>"
            f"<Type>{fault_type}</Type><Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
            f"</Error><RequestId>{request_id}</RequestId></ErrorResponse>"
        ).encode()
    return status, headers, body
