//! Resource addresses: the stable names by which the graph, the state and the
//! plan refer to a resource (`stack.network`, `eks.nodegroup.cpu`).
//!
//! An address is one or more dot-separated segments of lowercase ASCII
//! letters, digits and `-`; each segment starts with a letter or digit. The
//! first segment names the family (`stack`, `eks`, `k8s`, ...), the rest the
//! instance. The grammar is ours (Terraform's addresses are the model) and is
//! deliberately narrower than Terraform's so that an address is always a safe
//! file name, DOT identifier and JSON key.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A validated resource address such as `stack.network`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Address(String);

/// Why a string is not an [`Address`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid resource address {input:?}: {rule}")]
pub struct AddressError {
    /// The rejected input.
    pub input: String,
    /// The rule it broke.
    pub rule: &'static str,
}

impl Address {
    /// Parses and validates an address.
    ///
    /// # Errors
    /// [`AddressError`] when the input is empty, longer than 128 characters,
    /// has an empty segment, or contains a character outside `[a-z0-9-]`.
    pub fn new(input: impl Into<String>) -> Result<Self, AddressError> {
        let input = input.into();
        let fail = |rule| {
            Err(AddressError {
                input: input.clone(),
                rule,
            })
        };
        if input.is_empty() || input.len() > 128 {
            return fail("must be 1 to 128 characters");
        }
        for segment in input.split('.') {
            let Some(first) = segment.chars().next() else {
                return fail("segments separated by '.' must not be empty");
            };
            if !first.is_ascii_lowercase() && !first.is_ascii_digit() {
                return fail("each segment must start with a lowercase letter or a digit");
            }
            if !segment
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            {
                return fail("segments may contain only lowercase letters, digits and '-'");
            }
        }
        Ok(Self(input))
    }

    /// The address as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Address {
    type Err = AddressError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl Serialize for Address {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Address {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Address::new(s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_profile_addresses() {
        for ok in [
            "stack.network",
            "eks.nodegroup.cpu",
            "k8s.efs-csi",
            "a",
            "r1.2x",
        ] {
            assert_eq!(Address::new(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn rejects_malformed_addresses() {
        for bad in [
            "",
            "stack..network",
            ".stack",
            "stack.",
            "Stack.network",
            "stack.net_work",
            "-stack",
            "stack network",
        ] {
            assert!(Address::new(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(Address::new("a".repeat(129)).is_err());
    }

    #[test]
    fn serde_validates_on_the_way_in() {
        let a: Address = serde_json::from_str("\"eks.cluster\"").unwrap();
        assert_eq!(serde_json::to_string(&a).unwrap(), "\"eks.cluster\"");
        assert!(serde_json::from_str::<Address>("\"EKS\"").is_err());
    }
}
