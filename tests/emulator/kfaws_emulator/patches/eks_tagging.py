"""EKS tagging of node groups, and UntagResource of several keys at once.

AWS TagResource, UntagResource and ListTagsForResource take the ARN of a
cluster or of a managed node group (among other EKS resources), and
UntagResource's ``tagKeys`` is a list, sent as repeated query parameters
(``?tagKeys=a&tagKeys=b``).
https://docs.aws.amazon.com/eks/latest/APIReference/API_TagResource.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_UntagResource.html
https://docs.aws.amazon.com/eks/latest/APIReference/API_ListTagsForResource.html

moto 5.2.5 finds clusters only (a node group's ARN answers
NotFoundException), and its UntagResource reads the first ``tagKeys``
value only, so untagging ``kfaws:deployment`` and ``kfaws:lineage`` left
the second. kfaws reads ownership from these tags on both kinds.
"""

from __future__ import annotations

from moto.core.responses import EmptyResult
from moto.eks.models import EKSBackend
from moto.eks.responses import EKSResponse

from ._common import wrap


def _resource(backend: EKSBackend, arn: str):
    """The cluster or node group of ``arn``, or None."""
    for cluster in backend.clusters.values():
        if cluster.arn == arn:
            return cluster
        for group in cluster.nodegroups.values():
            if group.arn == arn:
                return group
    return None


def apply() -> None:
    def tag(original):
        def tag_resource(self, resource_arn, tags):
            found = _resource(self, resource_arn)
            if found is None:
                return original(self, resource_arn, tags)
            found.tags.update(tags)
            return None

        return tag_resource

    def untag(original):
        def untag_resource(self, resource_arn, tag_keys):
            found = _resource(self, resource_arn)
            if found is None:
                return original(self, resource_arn, tag_keys)
            for key in [tag_keys] if isinstance(tag_keys, str) else tag_keys:
                found.tags.pop(key, None)
            return None

        return untag_resource

    def list_tags(original):
        def list_tags_for_resource(self, resource_arn):
            found = _resource(self, resource_arn)
            if found is None:
                return original(self, resource_arn)
            return found.tags

        return list_tags_for_resource

    def every_key(original):
        def untag_resource(self):
            keys = self.querystring.get("tagKeys")
            if not keys:
                return original(self)
            self.eks_backend.untag_resource(self._extract_arn_from_path(), list(keys))
            return EmptyResult()

        return untag_resource

    wrap(EKSBackend, "tag_resource", tag)
    wrap(EKSBackend, "untag_resource", untag)
    wrap(EKSBackend, "list_tags_for_resource", list_tags)
    wrap(EKSResponse, "untag_resource", every_key)
