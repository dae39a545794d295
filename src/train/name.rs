//! Training job names: generated once, valid for both runtimes that name
//! things after the job.
//!
//! - Kubernetes: the training operator names each replica's Pod and Service
//!   `<job>-master-0` / `<job>-worker-<i>`, and a Service name must be an
//!   RFC 1035 label: at most 63 characters of `a-z`, `0-9` and `-`, starting
//!   with a letter and ending with a letter or digit
//!   (<https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#rfc-1035-label-names>).
//! - SageMaker: `TrainingJobName` matches `^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}`
//!   (<https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateTrainingJob.html>).
//!
//! A name valid for the first with room for `-worker-999` is valid for the
//! second, so one name serves both.

use std::fmt;

use chrono::{DateTime, Utc};

/// The most replicas a job may have: the suffix `-worker-999` is what
/// [`JobName::MAX_LEN`] leaves room for.
pub const MAX_REPLICAS: u32 = 1000;

/// The longest replica suffix the operator appends: `-worker-` and the index
/// of the last worker (at most 999).
const SUFFIX_ROOM: usize = "-worker-".len() + 3;

/// A validated training job name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobName(String);

/// A job name that breaks a rule; the message names the rule and its source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job name {name:?} {rule}")]
pub struct JobNameError {
    /// The name given.
    pub name: String,
    /// The rule it breaks.
    pub rule: String,
}

impl JobName {
    /// The longest name: 63 (an RFC 1035 label) less the room for
    /// `-worker-999`, i.e. 52 characters.
    pub const MAX_LEN: usize = 63 - SUFFIX_ROOM;

    /// Checks `name` against both runtimes' rules.
    ///
    /// # Errors
    /// [`JobNameError`] naming every rule broken, so that one fix suffices.
    pub fn parse(name: &str) -> Result<Self, JobNameError> {
        if name.is_empty() {
            return Err(JobNameError {
                name: String::new(),
                rule: "is empty".into(),
            });
        }
        let mut broken = Vec::new();
        if name.len() > Self::MAX_LEN {
            broken.push(format!(
                "is {} characters long; at most {} are allowed, so that the training operator's \
                 replica names (`<job>-worker-<i>`) stay valid RFC 1035 labels of at most 63",
                name.len(),
                Self::MAX_LEN
            ));
        }
        let mut bad: Vec<char> = name
            .chars()
            .filter(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
            .collect();
        bad.sort_unstable();
        bad.dedup();
        if !bad.is_empty() {
            let listed: Vec<String> = bad.iter().map(|c| format!("{c:?}")).collect();
            broken.push(format!(
                "contains {}; only lowercase letters, digits and '-' are allowed (RFC 1035 \
                 label, as Kubernetes names Services; SageMaker also forbids '_' and '.')",
                listed.join(", ")
            ));
        }
        if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
            broken.push("must start with a lowercase letter (RFC 1035 label)".into());
        }
        if name.ends_with('-') {
            broken.push("must end with a letter or digit (RFC 1035 label)".into());
        }
        if broken.is_empty() {
            Ok(Self(name.to_string()))
        } else {
            Err(JobNameError {
                name: name.to_string(),
                rule: broken.join("; it also "),
            })
        }
    }

    /// A new name `<prefix>-YYYYMMDD-HHMMSS-<4 random hex>`, as the SageMaker
    /// SDK names jobs after a base name and a timestamp; the random part keeps
    /// two jobs started in the same second apart.
    ///
    /// # Errors
    /// [`JobNameError`] when `prefix` makes the name invalid.
    pub fn generate(prefix: &str, now: DateTime<Utc>) -> Result<Self, JobNameError> {
        let random = &uuid::Uuid::new_v4().simple().to_string()[..4];
        Self::parse(&format!(
            "{prefix}-{}-{random}",
            now.format("%Y%m%d-%H%M%S")
        ))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for JobName {
    type Err = JobNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SageMaker pattern, written out: `^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}`.
    fn sagemaker_valid(name: &str) -> bool {
        let re = regex_lite::Regex::new("^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$").unwrap();
        re.is_match(name)
    }

    #[test]
    fn generated_names_are_valid_for_both_runtimes_with_the_longest_replica_suffix() {
        let now = DateTime::parse_from_rfc3339("2026-12-01T06:15:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let a = JobName::generate("kfaws-train", now).unwrap();
        let b = JobName::generate("kfaws-train", now).unwrap();
        assert!(
            a.as_str().starts_with("kfaws-train-20261201-061500-"),
            "{a}"
        );
        assert_ne!(a, b, "two jobs in the same second get different names");
        for name in [a.as_str(), &"a".repeat(JobName::MAX_LEN)] {
            JobName::parse(name).unwrap();
            let longest_replica = format!("{name}-worker-999");
            assert!(longest_replica.len() <= 63, "{longest_replica}");
            assert!(sagemaker_valid(name), "{name}");
        }
    }

    #[test]
    fn bad_names_are_refused_with_the_rule() {
        for (name, rule) in [
            ("my_job", "'_'"),
            ("MyJob", "'M'"),
            ("1job", "start with a lowercase letter"),
            ("job-", "end with a letter or digit"),
            ("", "empty"),
            (&"a".repeat(70), "70 characters long; at most 52"),
            (&"a".repeat(53), "53 characters long"),
            ("job.v2", "'.'"),
        ] {
            let e = JobName::parse(name).unwrap_err().to_string();
            assert!(e.contains(rule), "{name}: {e}");
        }
    }

    #[test]
    fn every_rule_a_name_breaks_is_named_at_once() {
        // Case C19: a name from another tool, too long and with '_'.
        let name = "health_and_personal_care_inter_title-2018-09-06-05-57-49-470";
        let e = JobName::parse(name).unwrap_err().to_string();
        assert!(
            e.contains("is 60 characters long")
                && e.contains("; it also contains '_'")
                && !e.contains("start with"),
            "{e}"
        );
        let e = JobName::parse("My_Job.-").unwrap_err().to_string();
        assert!(
            e.contains("contains '.', 'J', 'M', '_'")
                && e.contains("must start with a lowercase letter")
                && e.contains("must end with a letter or digit"),
            "{e}"
        );
    }
}
