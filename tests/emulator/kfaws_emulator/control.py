"""The control API under ``/_kfaws/``: JSON in, JSON out.

| method | path | body / query | effect |
|---|---|---|---|
| GET | /_kfaws/health | | ``{"status": "ok", "warm": bool, "moto": version}`` |
| GET | /_kfaws/faults | | the rules, with ``seen`` / ``fired`` counters |
| POST | /_kfaws/faults | a rule (``faults.Rule``) | adds it; 201 with the rule and its ``id`` |
| DELETE | /_kfaws/faults | ``?account_id=`` optional | removes all rules (or that account's) |
| PUT | /_kfaws/faults/seed | ``{"seed": int}`` | makes probabilistic rules reproducible |
| GET | /_kfaws/lifecycle | ``?account_id=`` optional | scale, durations, effective seconds, pending transitions |
| PUT | /_kfaws/lifecycle | ``{"scale": s, "durations": {key: seconds}}``, ``?account_id=`` optional | merges the settings, globally or for one account |
| POST | /_kfaws/cfn/rollback-failures | ``{"stack_name", "logical_id", "reason"?, "count"?, "account_id"?}`` | the next ``count`` (default 1, ``null``: every) rollbacks of failed updates of that stack fail on ``logical_id`` (``patches/cfn_update_rollback_failed.py``); 201 with the rule, its ``id`` and ``fired`` |
| GET | /_kfaws/cfn/rollback-failures | | the rules, with ``count`` left and ``fired`` |
| DELETE | /_kfaws/cfn/rollback-failures | ``?account_id=`` optional | removes all rules (or those naming that account) |
| GET | /_kfaws/calls | ``?account_id=`` optional | calls per account, service, operation |
| DELETE | /_kfaws/calls | | forgets the call counts |
| POST | /_kfaws/reset | | forgets all resources, rules (fault and rollback-failure), counts, lifecycle settings and registered cluster endpoints |
| PUT | /_kfaws/eks/cluster-endpoint | ``{"endpoint", "certificate_authority_data", "account_id"?}`` | EKS clusters of that account (or all) answer this API server |
| GET | /_kfaws/eks/cluster-endpoint | | the registrations |
| GET | /_kfaws/eks/cluster-creator | ``?account_id=&region=&name=`` | ``{"arn": ...}``: who created the cluster |
| GET | /_kfaws/efs/local-root | | ``{"root": "/abs/path"}``: file system ``fs-x``'s contents are ``root/fs-x`` (``patches/efs_local_root.py``) |
| GET | /_kfaws/sagemaker/local | | ``{"work_dir", "running_pids"}``: where local jobs and endpoints keep their files, and their live processes |
| GET | /_kfaws/ecr/registry | | ``{"url", "username", "password", "metrics_url"}`` of the loopback registry behind ECR (``registry.py``), 404 if none |

Errors are 400 ``{"error": message}`` naming the field and the rule, or 404.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from importlib.metadata import version

from werkzeug.wrappers import Request, Response

from . import registry
from .faults import RuleError
from .lifecycle import LifecycleError
from .operations import ACCOUNT_ID
from .patches import cfn_update_rollback_failed, eks_cluster_endpoint
from .patches.eks_cluster_endpoint import EndpointError


def _json(data, status: int = 200) -> Response:
    return Response(json.dumps(data, indent=1) + "\n", status=status, mimetype="application/json")


def _body(request: Request):
    raw = request.get_data()
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError as err:
        raise RuleError(f"the request body is not valid JSON: {err}") from None


def _route(app, request: Request) -> Response:
    path = request.path.rstrip("/")
    method = request.method
    account = request.args.get("account_id")
    if account is not None and not ACCOUNT_ID.match(account):
        raise RuleError("query parameter 'account_id' must be a 12-digit AWS account id")
    if path == "/_kfaws/health" and method == "GET":
        return _json({"status": "ok", "warm": app.warm, "moto": version("moto")})
    if path == "/_kfaws/faults":
        if method == "GET":
            return _json(app.faults.list())
        if method == "POST":
            rule = app.faults.add(_body(request))
            return _json(asdict(rule), status=201)
        if method == "DELETE":
            return _json({"removed": app.faults.clear(account)})
    if path == "/_kfaws/faults/seed" and method == "PUT":
        seed = _body(request).get("seed")
        if not isinstance(seed, int):
            raise RuleError("field 'seed' must be an integer")
        app.faults.reseed(seed)
        return _json({"seed": seed})
    if path == "/_kfaws/lifecycle":
        if method == "GET":
            return _json(app.lifecycle.settings(account))
        if method == "PUT":
            app.lifecycle.configure(_body(request), account)
            return _json(app.lifecycle.settings(account))
    if path == "/_kfaws/cfn/rollback-failures":
        if method == "GET":
            return _json(cfn_update_rollback_failed.rules())
        if method == "POST":
            return _json(cfn_update_rollback_failed.add(_body(request)), status=201)
        if method == "DELETE":
            return _json({"removed": cfn_update_rollback_failed.clear(account)})
    if path == "/_kfaws/calls":
        if method == "GET":
            return _json(app.calls.snapshot(account))
        if method == "DELETE":
            app.calls.clear()
            return _json({})
    if path == "/_kfaws/eks/cluster-endpoint":
        if method == "PUT":
            with app.moto_lock:
                return _json(eks_cluster_endpoint.register(_body(request)))
        if method == "GET":
            return _json(eks_cluster_endpoint.registrations())
    if path == "/_kfaws/eks/cluster-creator" and method == "GET":
        with app.moto_lock:
            try:
                return _json(eks_cluster_endpoint.creator(account, request.args.get("region"), request.args.get("name")))
            except LookupError as err:
                return _json({"error": str(err)}, status=404)
    if path == "/_kfaws/ecr/registry" and method == "GET":
        return _json(*registry.control_answer())
    if path == "/_kfaws/efs/local-root" and method == "GET":
        from .patches import efs_local_root

        return _json({"root": str(efs_local_root.root())})
    if path == "/_kfaws/sagemaker/local" and method == "GET":
        from .patches import _local

        return _json({"work_dir": str(_local.work_dir()), "running_pids": _local.running_children()})
    if path == "/_kfaws/reset" and method == "POST":
        app.reset()
        return _json({})
    return _json({"error": f"no control route {method} {request.path}"}, status=404)


def handle(app, environ, start_response):
    request = Request(environ)
    try:
        response = _route(app, request)
    except (RuleError, LifecycleError, EndpointError) as err:
        response = _json({"error": str(err)}, status=400)
    return response(environ, start_response)
