"""EKS access configuration, access entries and access policies.

AWS: a cluster's ``accessConfig.authenticationMode`` is ``CONFIG_MAP`` (the
API default), ``API_AND_CONFIG_MAP`` or ``API``; CreateCluster takes it with
``bootstrapClusterCreatorAdminPermissions`` (default true; false is refused
for ``CONFIG_MAP``), and a mode with the EKS API gives the creating
principal an access entry with ``AmazonEKSClusterAdminPolicy`` at cluster
scope. UpdateClusterConfig's ``accessConfig`` changes the mode one way only
(``CONFIG_MAP`` → ``API_AND_CONFIG_MAP`` → ``API``: "you can't change the
authentication mode back to a mode that removes the EKS API and access
entries"), as an ``AccessConfigUpdate`` update; any other change (the same
mode, a step back) is ``InvalidParameterException`` "Unsupported
authentication mode update from X to Y". Real EKS also refuses
``CONFIG_MAP`` → ``API`` directly with that message (quoted from real
responses in pulumi/pulumi-eks#1493; pulumi/pulumi-aws#4789), although the
user guide's CLI step reads as if it were allowed: this module refuses it.
Only one type of update per UpdateClusterConfig call.

Access entries (``/clusters/{name}/access-entries[/{principalArn}]``) and
their policy associations (``.../access-policies[/{policyArn}]``) exist only
while the mode includes the API; on a ``CONFIG_MAP`` cluster every one of
these calls is ``InvalidRequestException`` "The cluster's authentication
mode must be set to one of [API, API_AND_CONFIG_MAP] to perform this
operation." A second entry for a principal is ``ResourceInUseException``
(409) "The specified access entry resource is already in use on this
cluster." unless it repeats the first one's ``clientRequestToken``; an
unknown entry is ``ResourceNotFoundException`` (404) "The specified
principalArn could not be found. You can view your available access entries
with 'list-access-entries'."; a ``principalArn`` that is not an IAM role or
user ARN is ``InvalidParameterException`` "The specified principalArn is
invalid: invalid principal." (messages as real EKS answers, quoted in
terraform-aws-modules/terraform-aws-eks#3024, #3293, #2969 and
aws-ia/terraform-aws-eks-blueprints#1877). Associating an associated policy
again replaces its scope. DeleteAccessEntry removes its associations;
DeleteCluster its entries.
https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateAccessConfigRequest.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateAccessConfigRequest.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateAccessEntry.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeAccessEntry.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateAccessEntry.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_DeleteAccessEntry.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_ListAccessEntries.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_AssociateAccessPolicy.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_DisassociateAccessPolicy.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_ListAssociatedAccessPolicies.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_ListAccessPolicies.html
https://docs.aws.amazon.com/eks/latest/userguide/access-entries.html
https://docs.aws.amazon.com/eks/latest/userguide/setting-up-access-entries.html
https://docs.aws.amazon.com/eks/latest/userguide/access-policy-permissions.html

moto 5.2.5 has none of this: CreateCluster ignores ``accessConfig``,
DescribeCluster answers none, UpdateClusterConfig ignores it, and the access
entry and access policy routes answer 404.

Local choices (not confirmed against real EKS): an unknown ``policyArn`` is
``InvalidParameterException``; the principal's existence in IAM is not
checked (only the ARN's form); the creator's entry is for the IAM principal
behind the caller identity STS GetCallerIdentity answers for the request's
access key (an assumed role → its role ARN; moto's default identity
``arn:aws:sts::<account>:user/moto`` → ``arn:aws:iam::<account>:user/moto``).
"""

from __future__ import annotations

import re

from moto.core.responses import ActionResult, EmptyResult
from moto.core.utils import utcnow
from moto.eks import urls
from moto.eks.exceptions import (
    InvalidParameterException,
    InvalidRequestException,
    ResourceInUseException,
    ResourceNotFoundException,
)
from moto.eks.models import EKSBackend
from moto.eks.responses import EKSResponse
from moto.moto_api._internal import mock_random as random
from moto.sts.models import sts_backends
from moto.utilities.utils import get_partition

from ._common import argument, thread_state, wrap
from .eks_updates import _cluster_update

MODES = ("CONFIG_MAP", "API_AND_CONFIG_MAP", "API")
# One-way changes real EKS accepts (CONFIG_MAP -> API directly is refused).
TRANSITIONS = {("CONFIG_MAP", "API_AND_CONFIG_MAP"), ("API_AND_CONFIG_MAP", "API")}

POLICY_PREFIX = "arn:aws:eks::aws:cluster-access-policy/"
# The EKS access policies (ListAccessPolicies; EKS User Guide, "Review access policy permissions").
POLICY_NAMES = (
    "AmazonEKSAdminPolicy",
    "AmazonEKSAdminViewPolicy",
    "AmazonEKSAutoNodePolicy",
    "AmazonEKSBlockStoragePolicy",
    "AmazonEKSClusterAdminPolicy",
    "AmazonEKSComputePolicy",
    "AmazonEKSEditPolicy",
    "AmazonEKSHybridPolicy",
    "AmazonEKSLoadBalancingPolicy",
    "AmazonEKSNetworkingPolicy",
    "AmazonEKSViewPolicy",
    "AmazonEMRJobPolicy",
)
CLUSTER_ADMIN = POLICY_PREFIX + "AmazonEKSClusterAdminPolicy"
ENTRY_TYPES = ("STANDARD", "EC2", "EC2_LINUX", "EC2_WINDOWS", "FARGATE_LINUX", "HYBRID_LINUX", "HYPERPOD_LINUX")
# Entry types whose Kubernetes identity EKS sets (no username or groups may be given).
NODE_USERNAMES = {
    "EC2": "system:node:{{SessionName}}",
    "EC2_LINUX": "system:node:{{EC2PrivateDNSName}}",
    "EC2_WINDOWS": "system:node:{{EC2PrivateDNSName}}",
    "FARGATE_LINUX": "system:node:{{SessionName}}",
    "HYBRID_LINUX": "system:node:{{SessionName}}",
    "HYPERPOD_LINUX": "sagemaker:hyperpod:{{SessionName}}",
}
# arn:<partition>:iam::<account>:(role|user)/[path/]name
PRINCIPAL = re.compile(r"^arn:(aws[a-z-]*):iam::(\d{12}):(role|user)/(?:[^/]+/)*([\w+=,.@-]+)$")

MODE_MESSAGE = (
    "The cluster's authentication mode must be set to one of [API, API_AND_CONFIG_MAP] to perform this operation."
)
IN_USE_MESSAGE = "The specified access entry resource is already in use on this cluster."
BOOTSTRAP_MESSAGE = (
    "bootstrapClusterCreatorAdminPermissions must be true if cluster authentication mode is set to CONFIG_MAP"
)
NO_ENTRY_MESSAGE = (
    "The specified principalArn could not be found. You can view your available access entries with "
    "'list-access-entries'."
)


def _invalid(name: str | None, message: str) -> InvalidParameterException:
    return InvalidParameterException(clusterName=name, message=message)


def _check_mode(name: str, mode) -> None:
    if mode not in MODES:
        raise _invalid(name, f"The specified authenticationMode {mode} is invalid; valid modes: {', '.join(MODES)}.")


def _not_found(name: str, message: str) -> ResourceNotFoundException:
    return ResourceNotFoundException(clusterName=name, message=message)


def _state(cluster) -> dict:
    """The cluster's access entries: principalArn -> {"entry", "token", "policies": {policyArn: association}}.

    Kept on the cluster object, so DeleteCluster takes them with it and each
    account and region (each backend) has its own.
    """
    if not hasattr(cluster, "kfaws_access_entries"):
        cluster.kfaws_access_entries = {}
    return cluster.kfaws_access_entries


def _mode(cluster) -> str:
    config = getattr(cluster, "access_config", None) or {}
    return config.get("authenticationMode", "CONFIG_MAP")


def _cluster(backend: EKSBackend, name: str):
    """Cluster ``name`` in a mode that admits access entries."""
    cluster = backend.clusters.get(name)
    if cluster is None:
        raise _not_found(name, f"No cluster found for name: {name}.")
    if _mode(cluster) == "CONFIG_MAP":
        raise InvalidRequestException(clusterName=name, message=MODE_MESSAGE)
    return cluster


def _record(backend: EKSBackend, name: str, principal: str) -> dict:
    record = _state(_cluster(backend, name)).get(principal)
    if record is None:
        raise _not_found(name, NO_ENTRY_MESSAGE)
    return record


def _principal(name: str | None, principal) -> re.Match:
    match = PRINCIPAL.match(principal) if isinstance(principal, str) else None
    if match is None:
        raise _invalid(name, "The specified principalArn is invalid: invalid principal.")
    return match


def _iam_principal(sts_arn: str, assumed_role_arn: str | None) -> str:
    """The IAM principal ARN behind a caller identity ARN."""
    if assumed_role_arn:
        return assumed_role_arn
    m = re.match(r"^arn:([^:]+):(?:sts|iam)::(\d{12}):(user/.+|root|assumed-role/([^/]+)/.+)$", sts_arn)
    if m is None:
        return sts_arn
    partition, account, rest, role = m.groups()
    if role:
        return f"arn:{partition}:iam::{account}:role/{role}"
    return f"arn:{partition}:iam::{account}:{rest}"


def _creator(backend: EKSBackend) -> str:
    """The IAM principal of the request's caller, as GetCallerIdentity names it, else the account root."""
    partition = get_partition(backend.region_name)
    access_key = getattr(thread_state(), "access_key", None)
    if not access_key:
        return f"arn:{partition}:iam::{backend.account_id}:root"
    sts = sts_backends[backend.account_id][partition]
    assumed = sts.get_assumed_role_from_access_key(access_key)
    arn = sts.get_caller_identity(access_key, backend.region_name)[1]
    return _iam_principal(arn, getattr(assumed, "role_arn", None) if assumed else None)


def _new_entry(backend: EKSBackend, cluster, principal: str, groups, username, entry_type, tags) -> dict:
    match = _principal(cluster.name, principal)
    kind, short = match.group(3), match.group(4)
    entry_type = entry_type or "STANDARD"
    if entry_type not in ENTRY_TYPES:
        raise _invalid(cluster.name, f"The specified type {entry_type} is invalid; valid types: {', '.join(ENTRY_TYPES)}.")
    if entry_type != "STANDARD":
        if kind != "role":
            raise _invalid(cluster.name, f"The principalArn of an access entry of type {entry_type} must be an IAM role.")
        if username or groups:
            raise _invalid(
                cluster.name, f"username and kubernetesGroups cannot be specified for access entries of type {entry_type}."
            )
        username = NODE_USERNAMES[entry_type]
        groups = []
    elif not username:
        username = (
            f"arn:{match.group(1)}:sts::{match.group(2)}:assumed-role/{short}/{{{{SessionName}}}}"
            if kind == "role"
            else principal
        )
    now = utcnow()
    return {
        "clusterName": cluster.name,
        "principalArn": principal,
        "kubernetesGroups": list(groups or []),
        "accessEntryArn": (
            f"arn:{backend.partition}:eks:{backend.region_name}:{backend.account_id}:access-entry/"
            f"{cluster.name}/{kind}/{match.group(2)}/{short}/{random.uuid4()}"
        ),
        "createdAt": now,
        "modifiedAt": now,
        "tags": dict(tags or {}),
        "username": username,
        "type": entry_type,
    }


def _scope(name: str, scope) -> dict:
    if not isinstance(scope, dict) or scope.get("type") not in ("cluster", "namespace"):
        raise _invalid(name, "accessScope.type must be one of [cluster, namespace].")
    namespaces = list(scope.get("namespaces") or [])
    if scope["type"] == "namespace" and not namespaces:
        raise _invalid(name, "accessScope.namespaces must contain at least one namespace when accessScope.type is namespace.")
    if scope["type"] == "cluster" and namespaces:
        raise _invalid(name, "accessScope.namespaces must be empty when accessScope.type is cluster.")
    return {"type": scope["type"], "namespaces": namespaces}


def _associate(record: dict, name: str, policy: str, scope) -> dict:
    if not (isinstance(policy, str) and policy.startswith(POLICY_PREFIX) and policy[len(POLICY_PREFIX):] in POLICY_NAMES):
        raise _invalid(name, f"The specified policyArn {policy} is not a valid EKS access policy; see ListAccessPolicies.")
    scope = _scope(name, scope)
    now = utcnow()
    existing = record["policies"].get(policy)
    association = {
        "policyArn": policy,
        "accessScope": scope,
        "associatedAt": existing["associatedAt"] if existing else now,
        "modifiedAt": now,
    }
    record["policies"][policy] = association
    return association


def _page(items: list, max_results, next_token, name: str) -> tuple[list, str | None]:
    try:
        start = int(next_token) if next_token else 0
    except ValueError:
        raise _invalid(name, "The nextToken is invalid.") from None
    size = int(max_results) if max_results else 100
    if not 1 <= size <= 100:
        raise _invalid(name, "maxResults must be between 1 and 100.")
    end = start + size
    return items[start:end], (str(end) if end < len(items) else None)


def _find_entry(backend: EKSBackend, arn: str) -> dict | None:
    for cluster in backend.clusters.values():
        for record in _state(cluster).values():
            if record["entry"]["accessEntryArn"] == arn:
                return record["entry"]
    return None


def apply() -> None:
    urls.url_paths["{0}/access-policies$"] = urls.response.dispatch
    urls.url_paths["{0}/clusters/(?P<name>[^/]+)/access-entries$"] = urls.response.dispatch
    # principalArn has slashes once decoded; the operation (entry, its policies,
    # one policy) is told apart by moto's router on the raw, encoded path.
    urls.url_paths["{0}/clusters/(?P<name>[^/]+)/access-entries/(?P<principalArn>.+)$"] = urls.response.dispatch

    # --- CreateCluster / DescribeCluster: accessConfig -------------------------------------------

    def make_create_cluster(original):
        def create_cluster(self, *args, **kwargs):
            name = argument(original, "name", (self, *args), kwargs)
            existed = name in self.clusters
            requested = getattr(thread_state(), "eks_access_config", None) or {}
            mode = requested.get("authenticationMode") or "CONFIG_MAP"
            bootstrap = requested.get("bootstrapClusterCreatorAdminPermissions")
            if not existed:
                _check_mode(name, mode)
                if mode == "CONFIG_MAP" and bootstrap is False:
                    raise _invalid(name, BOOTSTRAP_MESSAGE)
            cluster = original(self, *args, **kwargs)
            if existed:
                return cluster
            bootstrap = bootstrap is not False
            cluster.access_config = {"authenticationMode": mode, "bootstrapClusterCreatorAdminPermissions": bootstrap}
            if mode != "CONFIG_MAP" and bootstrap:
                creator = _creator(self)
                entry = _new_entry(self, cluster, creator, [], None, "STANDARD", {})
                record = {"entry": entry, "token": None, "policies": {}}
                _associate(record, name, CLUSTER_ADMIN, {"type": "cluster"})
                _state(cluster)[creator] = record
            return cluster

        return create_cluster

    def make_response_create_cluster(original):
        def create_cluster(self):
            state = thread_state()
            state.eks_access_config = self._get_param("accessConfig")
            try:
                return original(self)
            finally:
                state.eks_access_config = None

        return create_cluster

    wrap(EKSBackend, "create_cluster", make_create_cluster)
    wrap(EKSResponse, "create_cluster", make_response_create_cluster)

    # --- UpdateClusterConfig: accessConfig ------------------------------------------------------

    def update_cluster_access_config(self, name: str, access_config) -> dict:
        cluster = self.clusters.get(name)
        if cluster is None:
            raise _not_found(name, f"No cluster found for name: {name}.")
        wanted = access_config.get("authenticationMode") if isinstance(access_config, dict) else None
        _check_mode(name, wanted)
        current = _mode(cluster)
        if (current, wanted) not in TRANSITIONS:
            raise _invalid(name, f"Unsupported authentication mode update from {current} to {wanted}")

        def change(c) -> None:
            c.access_config = {**(getattr(c, "access_config", None) or {}), "authenticationMode": wanted}

        params = [{"type": "AuthenticationMode", "value": wanted}]
        return _cluster_update(self, name, "AccessConfigUpdate", params, change)

    EKSBackend.update_cluster_access_config = update_cluster_access_config

    def make_response_update_cluster_config(original):
        def update_cluster_config(self):
            access_config = self._get_param("accessConfig")
            if access_config is None:
                return original(self)
            others = [
                k
                for k in ("resourcesVpcConfig", "logging", "kubernetesNetworkConfig", "remoteNetworkConfig", "upgradePolicy")
                if self._get_param(k) is not None
            ]
            name = self._get_param("name")
            if others:
                raise _invalid(name, "Only one type of update can be allowed.")
            update = self.eks_backend.update_cluster_access_config(name, access_config)
            return ActionResult({"update": update})

        return update_cluster_config

    wrap(EKSResponse, "update_cluster_config", make_response_update_cluster_config)

    # --- access entries -------------------------------------------------------------------------

    def create_access_entry(self, name, principal, groups, tags, token, username, entry_type) -> dict:
        cluster = _cluster(self, name)
        _principal(name, principal)
        entries = _state(cluster)
        existing = entries.get(principal)
        if existing is not None:
            if token and existing["token"] == token:
                return existing["entry"]
            raise ResourceInUseException(clusterName=name, message=IN_USE_MESSAGE)
        entry = _new_entry(self, cluster, principal, groups, username, entry_type, tags)
        entries[principal] = {"entry": entry, "token": token, "policies": {}}
        return entry

    def describe_access_entry(self, name, principal) -> dict:
        return _record(self, name, principal)["entry"]

    def update_access_entry(self, name, principal, groups, username) -> dict:
        entry = _record(self, name, principal)["entry"]
        if entry["type"] != "STANDARD" and (groups is not None or username is not None):
            raise _invalid(
                name, f"username and kubernetesGroups cannot be specified for access entries of type {entry['type']}."
            )
        if groups is not None:
            entry["kubernetesGroups"] = list(groups)
        if username is not None:
            entry["username"] = username
        entry["modifiedAt"] = utcnow()
        return entry

    def delete_access_entry(self, name, principal) -> None:
        _record(self, name, principal)
        del _state(self.clusters[name])[principal]

    def list_access_entries(self, name, policy, max_results, next_token) -> tuple[list, str | None]:
        entries = _state(_cluster(self, name))
        arns = [p for p, r in entries.items() if policy is None or policy in r["policies"]]
        return _page(arns, max_results, next_token, name)

    def associate_access_policy(self, name, principal, policy, scope) -> dict:
        return _associate(_record(self, name, principal), name, policy, scope)

    def disassociate_access_policy(self, name, principal, policy) -> None:
        record = _record(self, name, principal)
        if record["policies"].pop(policy, None) is None:
            raise _not_found(name, f"The specified policyArn {policy} is not associated with the access entry.")

    def list_associated_access_policies(self, name, principal, max_results, next_token):
        record = _record(self, name, principal)
        return _page(list(record["policies"].values()), max_results, next_token, name)

    EKSBackend.create_access_entry = create_access_entry
    EKSBackend.describe_access_entry = describe_access_entry
    EKSBackend.update_access_entry = update_access_entry
    EKSBackend.delete_access_entry = delete_access_entry
    EKSBackend.list_access_entries = list_access_entries
    EKSBackend.associate_access_policy = associate_access_policy
    EKSBackend.disassociate_access_policy = disassociate_access_policy
    EKSBackend.list_associated_access_policies = list_associated_access_policies

    def _name(self) -> str:
        return self._get_param("name") or self._get_param("clusterName")

    def response_create_access_entry(self) -> ActionResult:
        entry = self.eks_backend.create_access_entry(
            _name(self),
            self._get_param("principalArn"),
            self._get_param("kubernetesGroups"),
            self._get_param("tags"),
            self._get_param("clientRequestToken"),
            self._get_param("username"),
            self._get_param("type"),
        )
        return ActionResult({"accessEntry": entry})

    def response_describe_access_entry(self) -> ActionResult:
        return ActionResult(
            {"accessEntry": self.eks_backend.describe_access_entry(_name(self), self._get_param("principalArn"))}
        )

    def response_update_access_entry(self) -> ActionResult:
        entry = self.eks_backend.update_access_entry(
            _name(self),
            self._get_param("principalArn"),
            self._get_param("kubernetesGroups"),
            self._get_param("username"),
        )
        return ActionResult({"accessEntry": entry})

    def response_delete_access_entry(self) -> EmptyResult:
        self.eks_backend.delete_access_entry(_name(self), self._get_param("principalArn"))
        return EmptyResult()

    def response_list_access_entries(self) -> ActionResult:
        arns, token = self.eks_backend.list_access_entries(
            _name(self),
            self._get_param("associatedPolicyArn"),
            self._get_param("maxResults"),
            self._get_param("nextToken"),
        )
        return ActionResult({"accessEntries": arns, "nextToken": token})

    def response_associate_access_policy(self) -> ActionResult:
        name, principal = _name(self), self._get_param("principalArn")
        association = self.eks_backend.associate_access_policy(
            name, principal, self._get_param("policyArn"), self._get_param("accessScope")
        )
        return ActionResult({"clusterName": name, "principalArn": principal, "associatedAccessPolicy": association})

    def response_disassociate_access_policy(self) -> EmptyResult:
        self.eks_backend.disassociate_access_policy(
            _name(self), self._get_param("principalArn"), self._get_param("policyArn")
        )
        return EmptyResult()

    def response_list_associated_access_policies(self) -> ActionResult:
        name, principal = _name(self), self._get_param("principalArn")
        associations, token = self.eks_backend.list_associated_access_policies(
            name, principal, self._get_param("maxResults"), self._get_param("nextToken")
        )
        return ActionResult(
            {"clusterName": name, "principalArn": principal, "associatedAccessPolicies": associations, "nextToken": token}
        )

    def response_list_access_policies(self) -> ActionResult:
        policies = [{"name": n, "arn": POLICY_PREFIX + n} for n in POLICY_NAMES]
        page, token = _page(policies, self._get_param("maxResults"), self._get_param("nextToken"), None)
        return ActionResult({"accessPolicies": page, "nextToken": token})

    EKSResponse.create_access_entry = response_create_access_entry
    EKSResponse.describe_access_entry = response_describe_access_entry
    EKSResponse.update_access_entry = response_update_access_entry
    EKSResponse.delete_access_entry = response_delete_access_entry
    EKSResponse.list_access_entries = response_list_access_entries
    EKSResponse.associate_access_policy = response_associate_access_policy
    EKSResponse.disassociate_access_policy = response_disassociate_access_policy
    EKSResponse.list_associated_access_policies = response_list_associated_access_policies
    EKSResponse.list_access_policies = response_list_access_policies

    # --- tags on an access entry's ARN ----------------------------------------------------------

    def tag(original):
        def tag_resource(self, resource_arn, tags):
            entry = _find_entry(self, resource_arn)
            if entry is None:
                return original(self, resource_arn, tags)
            entry["tags"].update(tags)
            return None

        return tag_resource

    def untag(original):
        def untag_resource(self, resource_arn, tag_keys):
            entry = _find_entry(self, resource_arn)
            if entry is None:
                return original(self, resource_arn, tag_keys)
            for key in [tag_keys] if isinstance(tag_keys, str) else tag_keys:
                entry["tags"].pop(key, None)
            return None

        return untag_resource

    def list_tags(original):
        def list_tags_for_resource(self, resource_arn):
            entry = _find_entry(self, resource_arn)
            return original(self, resource_arn) if entry is None else entry["tags"]

        return list_tags_for_resource

    wrap(EKSBackend, "tag_resource", tag)
    wrap(EKSBackend, "untag_resource", untag)
    wrap(EKSBackend, "list_tags_for_resource", list_tags)
