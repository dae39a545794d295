"""CloudFormation ``DetectStackResourceDrift`` for ``AWS::IAM::Role``.

AWS: "Returns information about whether a resource's actual configuration
differs, or has drifted, from its expected configuration, as defined in the
stack template and any values specified as template parameters." The answer
(``StackResourceDrift``) holds ``ExpectedProperties`` (the template's
properties, intrinsic functions resolved) and ``ActualProperties`` as JSON
text, the ``PropertyDifferences`` (``PropertyPath`` as a JSON pointer,
``ExpectedValue``, ``ActualValue``, ``DifferenceType`` ``ADD`` | ``REMOVE`` |
``NOT_EQUAL``) and ``StackResourceDriftStatus`` (``IN_SYNC`` | ``MODIFIED`` |
``DELETED`` | ``NOT_CHECKED``).
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DetectStackResourceDrift.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_StackResourceDrift.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_PropertyDifference.html

moto 5.2.5 has no drift detection. This patch records each role's resolved
template properties when CloudFormation creates or updates it and compares
them with the IAM role as it is now. Only the properties the template sets
are compared (CloudFormation does the same: a property left out of the
template is not checked). Policy documents are compared as IAM reads them:
a string where a list of one is allowed (``Action``, ``Resource``,
``Principal`` values, condition values) is that list, and the order inside
those lists does not matter. ``Policies`` are matched by ``PolicyName``: a
difference's path indexes the expected list, and an inline policy only the
role has (added outside the stack) is ``ADD`` at an index past its end.
Resource types other than ``AWS::IAM::Role`` answer ``NOT_CHECKED``.
"""

from __future__ import annotations

import copy
import datetime
import json
import urllib.parse

from moto.cloudformation.responses import CloudFormationResponse
from moto.core.responses import ActionResult
from moto.iam.models import Role, iam_backends
from moto.utilities.utils import get_partition

from ._common import wrap

# The AWS::IAM::Role properties compared, by template name.
_COMPARED = (
    "RoleName",
    "Description",
    "Path",
    "MaxSessionDuration",
    "AssumeRolePolicyDocument",
    "Policies",
    "ManagedPolicyArns",
    "PermissionsBoundary",
)

# Policy element keys whose value may be one string or a list of them
# (IAM User Guide, "IAM JSON policy element reference").
_LISTS = {"Action", "NotAction", "Resource", "NotResource"}


def _document(value):
    """A policy document as JSON: CloudFormation accepts text or an object; IAM returns URL-encoded text."""
    if isinstance(value, str):
        text = value if value.lstrip().startswith("{") else urllib.parse.unquote(value)
        try:
            return json.loads(text)
        except ValueError:
            return value
    return value


def _canonical(value, key=None):
    """A policy document in one spelling: a lone string where a list is allowed becomes
    that list, lists whose order IAM ignores are sorted, a lone statement is a list of one."""
    if key == "Condition" and isinstance(value, dict):
        return {
            op: {k: _strings(v) for k, v in keys.items()} if isinstance(keys, dict) else keys
            for op, keys in value.items()
        }
    if key in ("Principal", "NotPrincipal") and isinstance(value, dict):
        return {k: _strings(v) for k, v in value.items()}
    if key == "Statement" and isinstance(value, dict):
        value = [value]
    if isinstance(value, dict):
        return {k: _canonical(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if key in _LISTS:
        return _strings(value)
    return value


def _strings(value):
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return sorted(value)
    return value


def _expected(properties: dict) -> dict:
    expected = {k: copy.deepcopy(properties[k]) for k in _COMPARED if k in properties}
    if "ManagedPolicyArns" in expected:
        expected["ManagedPolicyArns"] = sorted(expected["ManagedPolicyArns"] or [])
    if "AssumeRolePolicyDocument" in expected:
        expected["AssumeRolePolicyDocument"] = _document(expected["AssumeRolePolicyDocument"])
    if "Policies" in expected:
        expected["Policies"] = [
            {"PolicyName": p.get("PolicyName"), "PolicyDocument": _document(p.get("PolicyDocument"))}
            for p in expected["Policies"] or []
        ]
    return expected


def _actual(role: Role, expected: dict) -> dict:
    live = {
        "RoleName": role.name,
        "Description": role.description,
        "Path": role.path,
        "MaxSessionDuration": role.max_session_duration,
        "AssumeRolePolicyDocument": _document(role.assume_role_policy_document),
        "ManagedPolicyArns": sorted(role.managed_policies),
        "PermissionsBoundary": role.permissions_boundary_arn,
    }
    by_name = {name: _document(doc) for name, doc in role.policies.items()}
    ordered = []
    for p in expected.get("Policies", []):
        if p["PolicyName"] in by_name:
            ordered.append({"PolicyName": p["PolicyName"], "PolicyDocument": by_name.pop(p["PolicyName"])})
    ordered += [{"PolicyName": n, "PolicyDocument": d} for n, d in sorted(by_name.items())]
    live["Policies"] = ordered
    return {k: live[k] for k in expected}


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _differences(expected, actual, path="") -> list:
    """PropertyDifference entries turning ``expected`` into ``actual``."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for key in list(expected) + [k for k in actual if k not in expected]:
            sub = f"{path}/{key}"
            if key not in actual:
                out.append(_difference(sub, expected[key], None, "REMOVE"))
            elif key not in expected:
                out.append(_difference(sub, None, actual[key], "ADD"))
            else:
                out += _differences(expected[key], actual[key], sub)
        return out
    if isinstance(expected, list) and isinstance(actual, list) and not all(
        isinstance(v, str) for v in expected + actual
    ):
        out = []
        for i in range(max(len(expected), len(actual))):
            sub = f"{path}/{i}"
            if i >= len(actual):
                out.append(_difference(sub, expected[i], None, "REMOVE"))
            elif i >= len(expected):
                out.append(_difference(sub, None, actual[i], "ADD"))
            else:
                out += _differences(expected[i], actual[i], sub)
        return out
    if expected != actual:
        return [_difference(path, expected, actual, "NOT_EQUAL")]
    return []


def _policy_differences(expected: list, actual: list) -> list:
    """Inline policies matched by name: paths index ``expected``; one only the role has is
    ``ADD`` past its end."""
    live = {p["PolicyName"]: p for p in actual}
    out = []
    for i, policy in enumerate(expected):
        mine = live.pop(policy["PolicyName"], None)
        if mine is None:
            out.append(_difference(f"/Policies/{i}", policy, None, "REMOVE"))
        else:
            out += _differences(policy, mine, f"/Policies/{i}")
    for k, name in enumerate(sorted(live)):
        out.append(_difference(f"/Policies/{len(expected) + k}", None, live[name], "ADD"))
    return out


def _difference(path, expected, actual, kind) -> dict:
    return {
        "PropertyPath": path,
        "ExpectedValue": "" if expected is None else _text(expected),
        "ActualValue": "" if actual is None else _text(actual),
        "DifferenceType": kind,
    }


def _role_drift(stack, resource) -> dict:
    properties = getattr(resource, "kfaws_cfn_properties", None)
    drift = {
        "StackId": stack.stack_id,
        "LogicalResourceId": resource.logical_resource_id,
        "ResourceType": "AWS::IAM::Role",
        "Timestamp": datetime.datetime.now(datetime.timezone.utc),
    }
    if properties is None:
        drift["StackResourceDriftStatus"] = "NOT_CHECKED"
        return drift
    expected = _expected(properties)
    drift["PhysicalResourceId"] = resource.name
    drift["ExpectedProperties"] = json.dumps(expected, sort_keys=True)
    backend = iam_backends[stack.account_id][get_partition(stack.region_name)]
    role = next((r for r in backend.roles.values() if r.name == resource.name), None)
    if role is None:
        drift["StackResourceDriftStatus"] = "DELETED"
        return drift
    actual = _actual(role, expected)
    drift["ActualProperties"] = json.dumps(actual, sort_keys=True)
    expected_c, actual_c = _canonical(expected), _canonical(actual)
    differences = _differences(
        {k: v for k, v in expected_c.items() if k != "Policies"},
        {k: v for k, v in actual_c.items() if k != "Policies"},
    )
    if "Policies" in expected_c:
        differences += _policy_differences(expected_c["Policies"], actual_c["Policies"])
    drift["PropertyDifferences"] = differences
    drift["StackResourceDriftStatus"] = "MODIFIED" if differences else "IN_SYNC"
    return drift


def detect_stack_resource_drift(self) -> ActionResult:
    stack_name = self._get_param("StackName")
    logical_id = self._get_param("LogicalResourceId")
    stack, resource = self.cloudformation_backend.describe_stack_resource(stack_name, logical_id)
    if getattr(resource, "cf_resource_type", None) == "AWS::IAM::Role":
        drift = _role_drift(stack, resource)
    else:
        drift = {
            "StackId": stack.stack_id,
            "LogicalResourceId": logical_id,
            "ResourceType": getattr(resource, "cf_resource_type", "Unknown"),
            "StackResourceDriftStatus": "NOT_CHECKED",
            "Timestamp": datetime.datetime.now(datetime.timezone.utc),
        }
    return ActionResult({"StackResourceDrift": drift})


def apply() -> None:
    def make_create(original):
        def create_from_cloudformation_json(resource_name, cloudformation_json, account_id, region_name, **kwargs):
            role = original(resource_name, cloudformation_json, account_id, region_name, **kwargs)
            role.kfaws_cfn_properties = copy.deepcopy(cloudformation_json.get("Properties", {}))
            return role

        return create_from_cloudformation_json

    def make_update(original):
        def update_from_cloudformation_json(original_resource, new_resource_name, cloudformation_json, account_id, region_name):
            role = original(
                original_resource=original_resource,
                new_resource_name=new_resource_name,
                cloudformation_json=cloudformation_json,
                account_id=account_id,
                region_name=region_name,
            )
            role.kfaws_cfn_properties = copy.deepcopy(cloudformation_json.get("Properties", {}))
            return role

        return update_from_cloudformation_json

    wrap(Role, "create_from_cloudformation_json", make_create)
    wrap(Role, "update_from_cloudformation_json", make_update)
    CloudFormationResponse.detect_stack_resource_drift = detect_stack_resource_drift
