"""Our patches to moto: each module restores one real-AWS behaviour moto lacks.

Each module has an ``apply()`` that installs it by wrapping moto methods, a
docstring naming the AWS documentation it follows, and a test in
``tests/emulator/tests/``. The list, with the reasons, is in README.md.
"""

from __future__ import annotations

import importlib

# Order matters where two patches wrap the same method: the later one wraps
# the earlier (lifecycle_stacks must see cfn_stack_failure's outcome;
# lifecycle_eks must see eks_idempotency's).
MODULES = (
    "cfn_managed_policy_arns",
    "cfn_drift_detection",
    "cfn_role_trust_update",
    # after the two above: a replacing update creates through their wrappers
    "cfn_role_replacement",
    "cfn_ec2_deletion",
    "cfn_delete_order",
    "cfn_stack_failure",
    "cfn_request_tokens",
    # after cfn_stack_failure: wraps its finish_update_rollback
    "cfn_update_rollback_failed",
    "cfn_stack_resources",
    "cfn_efs_getatt",
    "cfn_s3_bucket_settings",
    "cfn_update_no_changes",
    "cfn_change_set_parameters",
    # after the one above: marks the changes its diff lists
    "cfn_change_set_replacement",
    "cfn_list_parameters",
    "cfn_s3_bucket_policy",
    "cfn_unsupported_types",
    "ec2_dependency_violation",
    "eks_idempotency",
    "eks_cluster_vpc_config",
    "eks_updates",
    "eks_cluster_endpoint",
    "eks_tagging",
    "eks_oidc_issuer",
    # after eks_updates (it replaces EKSResponse.update_cluster_config, which this wraps)
    "eks_access_entries",
    "efs_already_exists_id",
    "efs_mount_target_interface",
    "lifecycle_eks",
    "lifecycle_efs",
    "lifecycle_nat",
    "lifecycle_stacks",
    "sts_presigned_signature",
    "ecr_authorization_token",
    "ecr_registry_images",
    # after lifecycle_efs: a file system's directory goes when DeleteFileSystem succeeds
    "efs_local_root",
    "sagemaker_training_runner",
    "sagemaker_create_existing",
    "sagemaker_endpoint_runner",
    "s3_cross_account_access",
    "s3_get_bucket_versioning",
)

_applied = False


def apply_all(skip: tuple[str, ...] = ()) -> None:
    """Installs every patch not named in ``skip``, once (idempotent).

    Raises ValueError naming an unknown patch in ``skip``.
    """
    global _applied
    unknown = set(skip) - set(MODULES)
    if unknown:
        raise ValueError(f"unknown patch(es) {sorted(unknown)}; known: {list(MODULES)}")
    if _applied:
        return
    for name in MODULES:
        if name not in skip:
            importlib.import_module(f"{__name__}.{name}").apply()
    _applied = True
