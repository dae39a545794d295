//! CloudFormation drift detection of one role's inline policy documents.
//!
//! `ListRolePolicies` shows which inline policies a role holds, not what
//! they say: an `Action: "*"` written into the template's own
//! `efs-csi-controller` policy keeps the name. Only CloudFormation knows the
//! document the template declares with its intrinsic functions resolved;
//! `DetectStackResourceDrift` returns it (`ExpectedProperties`) with the
//! differences from the live role (`PropertyDifferences`, each a JSON
//! pointer such as `/Policies/0/PolicyDocument/Statement/1/Action`)
//! (CloudFormation API Reference, DetectStackResourceDrift,
//! StackResourceDrift and PropertyDifference).

use std::collections::BTreeMap;

use aws_sdk_cloudformation::types::{DifferenceType, StackResourceDriftStatus};
use serde_json::Value;

use super::error_message;
use crate::resource::ResourceError;

/// The inline policies of one role whose document differs from the
/// template's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InlineDrift {
    /// Policy name → path inside its document (a JSON pointer such as
    /// `/Statement/0/Action`) → `{"expected": ..., "actual": ...}` (a side
    /// the document lacks is left out).
    pub edited: BTreeMap<String, BTreeMap<String, Value>>,
    /// Policy name → the document the template declares (resolved), for
    /// every inline policy of the template: what `PutRolePolicy` writes back.
    pub expected: BTreeMap<String, Value>,
}

/// Runs `DetectStackResourceDrift` on the role `logical_id` of `stack` and
/// returns its inline policies' document differences. Differences outside
/// `Policies` (trust, managed policies) and whole policies added or removed
/// are left out: [`super::trust::TrustGuard`] reads those from IAM. A role
/// the service reports `DELETED` or `NOT_CHECKED` has none.
///
/// # Errors
/// [`ResourceError`] for a failed call or an answer whose properties are
/// not JSON.
pub async fn inline_policies(
    cfn: &aws_sdk_cloudformation::Client,
    stack: &str,
    logical_id: &str,
) -> Result<InlineDrift, ResourceError> {
    let out = cfn
        .detect_stack_resource_drift()
        .stack_name(stack)
        .logical_resource_id(logical_id)
        .send()
        .await
        .map_err(|e| {
            ResourceError::msg(format!(
                "DetectStackResourceDrift {stack} {logical_id}: {}",
                error_message(&e)
            ))
        })?;
    let Some(drift) = out.stack_resource_drift() else {
        return Ok(InlineDrift::default());
    };
    let expected = match drift.expected_properties() {
        Some(text) => serde_json::from_str(text).map_err(|e| {
            ResourceError::msg(format!(
                "DetectStackResourceDrift {stack} {logical_id}: ExpectedProperties is not JSON: {e}"
            ))
        })?,
        None => Value::Null,
    };
    let names = policy_names(&expected);
    let mut found = InlineDrift {
        edited: BTreeMap::new(),
        expected: names
            .iter()
            .zip(expected["Policies"].as_array().into_iter().flatten())
            .map(|(name, p)| (name.clone(), p["PolicyDocument"].clone()))
            .collect(),
    };
    if matches!(
        drift.stack_resource_drift_status(),
        None | Some(
            StackResourceDriftStatus::InSync
                | StackResourceDriftStatus::Deleted
                | StackResourceDriftStatus::NotChecked
        )
    ) {
        return Ok(found);
    }
    for d in drift.property_differences() {
        let Some((index, inside)) = document_path(d.property_path().unwrap_or_default()) else {
            continue;
        };
        let Some(name) = names.get(index) else {
            continue;
        };
        // The values are JSON text (a string value may be bare); an ADD has
        // no expected value, a REMOVE no actual one.
        let value = |v: Option<&str>| match v {
            Some(v) if !v.is_empty() => {
                Some(serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string())))
            }
            _ => None,
        };
        let mut difference = serde_json::Map::new();
        if !matches!(d.difference_type(), Some(DifferenceType::Add)) {
            if let Some(v) = value(d.expected_value()) {
                difference.insert("expected".into(), v);
            }
        }
        if !matches!(d.difference_type(), Some(DifferenceType::Remove)) {
            if let Some(v) = value(d.actual_value()) {
                difference.insert("actual".into(), v);
            }
        }
        found
            .edited
            .entry(name.clone())
            .or_default()
            .insert(inside, Value::Object(difference));
    }
    Ok(found)
}

/// The `PolicyName`s of `ExpectedProperties.Policies`, by index.
fn policy_names(expected: &Value) -> Vec<String> {
    expected["Policies"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["PolicyName"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `(i, "/Statement/0/Action")` for `/Policies/i/PolicyDocument/Statement/0/Action`;
/// `None` for any other path (a whole policy, its name, another property).
fn document_path(path: &str) -> Option<(usize, String)> {
    let rest = path.strip_prefix("/Policies/")?;
    let (index, rest) = rest.split_once('/')?;
    let inside = rest.strip_prefix("PolicyDocument")?;
    let inside = if inside.is_empty() { "/" } else { inside };
    Some((index.parse().ok()?, inside.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_inside_a_policy_document_name_a_policy() {
        assert_eq!(
            document_path("/Policies/1/PolicyDocument/Statement/0/Action"),
            Some((1, "/Statement/0/Action".into()))
        );
        assert_eq!(
            document_path("/Policies/0/PolicyDocument"),
            Some((0, "/".into()))
        );
        for other in [
            "/Policies/0",
            "/Policies/2/PolicyName",
            "/AssumeRolePolicyDocument/Statement/0",
            "/ManagedPolicyArns",
            "/Policies/x/PolicyDocument",
        ] {
            assert_eq!(document_path(other), None, "{other}");
        }
    }

    #[test]
    fn policy_names_follow_the_expected_list() {
        let expected = serde_json::json!({"Policies": [
            {"PolicyName": "a", "PolicyDocument": {}},
            {"PolicyName": "b", "PolicyDocument": {}}
        ]});
        assert_eq!(policy_names(&expected), ["a", "b"]);
        assert!(policy_names(&Value::Null).is_empty());
    }
}
