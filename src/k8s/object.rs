//! Object identity independent of API version: group, kind, namespace, name.
//!
//! Two manifests naming the same object through different versions
//! (`autoscaling/v1` and `autoscaling/v2` HorizontalPodAutoscaler) are the
//! same object to the API server, so prune and destroy compare these keys,
//! never `apiVersion`.

use std::fmt;

/// A group and kind, e.g. `Deployment.apps`, `Namespace` (core group).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKind {
    /// The API group, empty for the core group.
    pub group: String,
    /// The kind.
    pub kind: String,
}

impl GroupKind {
    /// A group and kind.
    pub fn new(group: &str, kind: &str) -> Self {
        Self {
            group: group.to_string(),
            kind: kind.to_string(),
        }
    }

    /// Parses `Kind.group` (or `Kind` for the core group), the format of the
    /// ApplySet `contains-group-kinds` annotation; `None` for an empty string.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        if s.is_empty() {
            return None;
        }
        Some(match s.split_once('.') {
            Some((kind, group)) => Self::new(group, kind),
            None => Self::new("", s),
        })
    }
}

impl fmt::Display for GroupKind {
    /// `Kind.group`, or `Kind` for the core group (Kubernetes' `GroupKind.String()`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.kind)
        } else {
            write!(f, "{}.{}", self.kind, self.group)
        }
    }
}

/// One object: group, kind, namespace (absent when cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// Group and kind.
    pub gk: GroupKind,
    /// The namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl fmt::Display for ObjectRef {
    /// `Kind namespace/name` or `Kind name`, as kubectl prints objects.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.gk.kind, self.name),
            None => write!(f, "{} {}", self.gk.kind, self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_kinds_round_trip_through_the_annotation_format() {
        for s in ["Deployment.apps", "Namespace", "Widget.c8.kfaws.test"] {
            assert_eq!(GroupKind::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(
            GroupKind::parse("Widget.c8.kfaws.test").unwrap(),
            GroupKind::new("c8.kfaws.test", "Widget")
        );
        assert_eq!(GroupKind::parse(" "), None);
    }
}
