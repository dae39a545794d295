//! Naming rules of the services that receive the names kfaws derives, and
//! the check of every derived name against the rule of its receiver.
//!
//! Policy: a derived name that breaks a rule is **refused**, never shortened.
//! The error names the config field it came from, the derived name, the rule
//! and its source, and for a name that is too long the longest input that
//! fits. Refusing keeps every name predictable from the config, so users can
//! find their resources by name in the AWS console and in IAM policies.

use std::fmt;
use std::sync::LazyLock;

use regex_lite::Regex;

/// One naming rule of one service, as its API reference states it.
#[derive(Debug)]
pub struct Rule {
    /// What the rule governs, e.g. "CloudFormation stack name".
    pub what: &'static str,
    /// The rule as the reference states it (pattern and length).
    pub text: &'static str,
    /// Where the rule is defined.
    pub source: &'static str,
    /// Inclusive length limits in characters (bytes: all rules are ASCII-only).
    pub min_len: usize,
    /// See `min_len`.
    pub max_len: usize,
    pattern: &'static str,
    extra: fn(&str) -> Option<&'static str>,
}

fn no_extra(_: &str) -> Option<&'static str> {
    None
}

impl Rule {
    /// `None` when `value` satisfies the rule, otherwise what is wrong.
    pub fn violation(&self, value: &str) -> Option<String> {
        let len = value.chars().count();
        if len < self.min_len || len > self.max_len {
            return Some(format!(
                "it is {len} characters, the limit is {}..={}",
                self.min_len, self.max_len
            ));
        }
        // Every pattern is a literal in this file, covered by the tests below.
        let re = Regex::new(self.pattern).expect("naming rule patterns are valid");
        if !re.is_match(value) {
            return Some(explain_mismatch(&re, value));
        }
        (self.extra)(value).map(str::to_string)
    }
}

/// Says which characters of `value` the pattern refuses. A character is
/// refused when it fails even between two letters (`a?a`); when every
/// character is allowed somewhere, the first or last one is in the wrong place.
fn explain_mismatch(re: &Regex, value: &str) -> String {
    let mut bad: Vec<char> = value
        .chars()
        .filter(|c| !re.is_match(&format!("a{c}a")))
        .collect();
    bad.sort_unstable();
    bad.dedup();
    if !bad.is_empty() {
        let list: Vec<String> = bad.iter().map(|c| format!("{c:?}")).collect();
        return format!("it contains {} (not allowed)", list.join(", "));
    }
    let first = value.chars().next().unwrap_or_default();
    if !re.is_match(&format!("{first}a")) {
        return format!("it may not start with {first:?}");
    }
    let last = value.chars().last().unwrap_or_default();
    if !re.is_match(&format!("a{last}")) {
        return format!("it may not end with {last:?}");
    }
    format!("it does not match {}", re.as_str())
}

/// EKS cluster names.
pub static EKS_CLUSTER: Rule = Rule {
    what: "EKS cluster name",
    text: "[0-9A-Za-z][A-Za-z0-9-_]*, 1 to 100 characters",
    source: "Amazon EKS API Reference, CreateCluster, name",
    min_len: 1,
    max_len: 100,
    pattern: r"^[0-9A-Za-z][A-Za-z0-9\-_]*$",
    extra: no_extra,
};

/// EKS managed node group names.
pub static EKS_NODEGROUP: Rule = Rule {
    what: "EKS node group name",
    text: "starts with a letter or digit, then letters, digits, '-' and '_', 1 to 63 characters",
    source: "Amazon EKS API Reference, CreateNodegroup, nodegroupName",
    min_len: 1,
    max_len: 63,
    pattern: r"^[0-9A-Za-z][A-Za-z0-9\-_]*$",
    extra: no_extra,
};

/// CloudFormation stack names.
pub static CFN_STACK: Rule = Rule {
    what: "CloudFormation stack name",
    text: "[a-zA-Z][-a-zA-Z0-9]*, at most 128 characters",
    source: "AWS CloudFormation API Reference, CreateStack, StackName",
    min_len: 1,
    max_len: 128,
    pattern: r"^[a-zA-Z][-a-zA-Z0-9]*$",
    extra: no_extra,
};

/// IAM role names.
pub static IAM_ROLE: Rule = Rule {
    what: "IAM role name",
    text: "[\\w+=,.@-]+, 1 to 64 characters",
    source: "AWS IAM API Reference, CreateRole, RoleName",
    min_len: 1,
    max_len: 64,
    pattern: r"^[\w+=,.@-]+$",
    extra: no_extra,
};

fn s3_extra(name: &str) -> Option<&'static str> {
    if name.contains("..") {
        return Some("it contains two adjacent periods");
    }
    if name.split('.').count() == 4 && name.split('.').all(|p| p.parse::<u8>().is_ok()) {
        return Some("it is formatted as an IP address");
    }
    for prefix in ["xn--", "sthree-", "amzn-s3-demo-"] {
        if name.starts_with(prefix) {
            return Some("it starts with a reserved prefix (xn--, sthree-, amzn-s3-demo-)");
        }
    }
    for suffix in ["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"] {
        if name.ends_with(suffix) {
            return Some(
                "it ends with a reserved suffix (-s3alias, --ol-s3, .mrap, --x-s3, --table-s3)",
            );
        }
    }
    None
}

/// S3 general purpose bucket names.
pub static S3_BUCKET: Rule = Rule {
    what: "S3 bucket name",
    text: "3 to 63 characters of lowercase letters, digits, '.' and '-', starting and ending \
           with a letter or digit, no '..', not an IP address, no reserved prefix or suffix",
    source: "Amazon S3 User Guide, General purpose bucket naming rules",
    min_len: 3,
    max_len: 63,
    pattern: r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$",
    extra: s3_extra,
};

/// Kubernetes names that must be DNS labels (namespaces, most label values).
pub static DNS1123_LABEL: Rule = Rule {
    what: "Kubernetes DNS-1123 label",
    text: "[a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters",
    source: "Kubernetes docs, Object Names and IDs (RFC 1123 label names)",
    min_len: 1,
    max_len: 63,
    pattern: r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    extra: no_extra,
};

/// Kubernetes object names that must be DNS subdomains (most objects).
pub static DNS1123_SUBDOMAIN: Rule = Rule {
    what: "Kubernetes DNS-1123 subdomain",
    text: "dot-separated DNS-1123 labels, at most 253 characters",
    source: "Kubernetes docs, Object Names and IDs (DNS subdomain names)",
    min_len: 1,
    max_len: 253,
    pattern: r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    extra: no_extra,
};

/// Kubernetes names that must be RFC 1035 labels (Services: the PyTorchJob
/// operator names one Service per replica after the job).
pub static RFC1035_LABEL: Rule = Rule {
    what: "Kubernetes RFC 1035 label",
    text: "[a-z]([-a-z0-9]*[a-z0-9])?, at most 63 characters",
    source: "Kubernetes docs, Object Names and IDs (RFC 1035 label names)",
    min_len: 1,
    max_len: 63,
    pattern: r"^[a-z]([-a-z0-9]*[a-z0-9])?$",
    extra: no_extra,
};

/// SageMaker training job names.
pub static SAGEMAKER_JOB: Rule = Rule {
    what: "SageMaker training job name",
    text: "^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}",
    source: "Amazon SageMaker API Reference, CreateTrainingJob, TrainingJobName",
    min_len: 1,
    max_len: 63,
    pattern: r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$",
    extra: no_extra,
};

/// A name kfaws will send to a service, with where it came from.
#[derive(Debug, Clone)]
pub struct DerivedName {
    /// The config field (dotted path in `kfaws.toml`) the name is built from.
    pub field: String,
    /// The value of that field.
    pub input: String,
    /// The name as it will be sent.
    pub value: String,
    /// The rule of the receiving service.
    pub rule: &'static Rule,
}

/// A derived name that its receiving service would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct NameError {
    /// The config field the name comes from.
    pub field: String,
    /// The field's value.
    pub input: String,
    /// The derived name.
    pub value: String,
    /// What kind of name it is.
    pub what: &'static str,
    /// The rule, as documented.
    pub rule: &'static str,
    /// Where the rule is defined.
    pub reference: &'static str,
    /// What is wrong.
    pub problem: String,
    /// For a name that is too long: the longest `input` that would fit.
    pub longest_input: Option<usize>,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?} is invalid: ", self.field, self.input)?;
        if self.value != self.input {
            write!(f, "the derived {} {:?}", self.what, self.value)?;
        } else {
            write!(f, "this {}", self.what)?;
        }
        write!(
            f,
            " breaks the rule {} ({}); {}",
            self.rule, self.reference, self.problem
        )?;
        if let Some(n) = self.longest_input {
            write!(f, "; {} may be at most {n} characters here", self.field)?;
        }
        Ok(())
    }
}

impl DerivedName {
    /// Checks the name against its rule: `None` when it passes, else a
    /// [`NameError`] describing the field, the derived value, the rule, its
    /// source and, when the name is too long, the longest input that fits.
    pub fn problem(&self) -> Option<NameError> {
        let problem = self.rule.violation(&self.value)?;
        let len = self.value.chars().count();
        let longest_input =
            (len > self.rule.max_len && self.value.contains(&self.input)).then(|| {
                let overhead = len - self.input.chars().count();
                self.rule.max_len.saturating_sub(overhead)
            });
        Some(NameError {
            field: self.field.clone(),
            input: self.input.clone(),
            value: self.value.clone(),
            what: self.rule.what,
            rule: self.rule.text,
            reference: self.rule.source,
            problem,
            longest_input,
        })
    }
}

/// Checks every name, returning all failures (not only the first).
pub fn check_all(names: &[DerivedName]) -> Vec<NameError> {
    names.iter().filter_map(DerivedName::problem).collect()
}

/// AWS Regions kfaws knows (source: AWS General Reference, "AWS Regions").
/// A region outside this list is refused before any API call, the classic
/// typo (`us-east1`) that otherwise surfaces as an endpoint resolution error.
pub static KNOWN_REGIONS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    vec![
        "af-south-1",
        "ap-east-1",
        "ap-east-2",
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-northeast-3",
        "ap-south-1",
        "ap-south-2",
        "ap-southeast-1",
        "ap-southeast-2",
        "ap-southeast-3",
        "ap-southeast-4",
        "ap-southeast-5",
        "ap-southeast-6",
        "ap-southeast-7",
        "ca-central-1",
        "ca-west-1",
        "cn-north-1",
        "cn-northwest-1",
        "eu-central-1",
        "eu-central-2",
        "eu-north-1",
        "eu-south-1",
        "eu-south-2",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
        "il-central-1",
        "me-central-1",
        "me-south-1",
        "mx-central-1",
        "sa-east-1",
        "us-east-1",
        "us-east-2",
        "us-gov-east-1",
        "us-gov-west-1",
        "us-west-1",
        "us-west-2",
    ]
});

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(rule: &'static Rule, good: &[&str], bad: &[&str]) {
        for g in good {
            assert_eq!(rule.violation(g), None, "{g:?} should pass {}", rule.what);
        }
        for b in bad {
            assert!(
                rule.violation(b).is_some(),
                "{b:?} should fail {}",
                rule.what
            );
        }
    }

    #[test]
    fn eks_cluster_rule() {
        ok(
            &EKS_CLUSTER,
            &["ml", "ml_team", "ML-Team-01", "0abc"],
            &["", "-ml", "_ml", "ml.team", "ml team", &"a".repeat(101)],
        );
    }

    #[test]
    fn eks_nodegroup_rule() {
        ok(
            &EKS_NODEGROUP,
            &["ml-cpu", "ml_cpu", &"a".repeat(63)],
            &["-cpu", "cpu.1", &"a".repeat(64)],
        );
    }

    #[test]
    fn cloudformation_stack_rule() {
        ok(
            &CFN_STACK,
            &["kfaws-ml-network", "A1-b2"],
            &[
                "kfaws-ml_team-network",
                "1stack",
                "test-k8_cluster01",
                &"a".repeat(129),
            ],
        );
    }

    #[test]
    fn iam_role_rule() {
        ok(
            &IAM_ROLE,
            &[
                "sagemakerrole",
                "kfaws-ml_team-us-east-1-eks-node",
                "a+b=c,d.e@f-g",
                &"r".repeat(64),
            ],
            &["", "role name", "role/name", &"r".repeat(65)],
        );
    }

    #[test]
    fn s3_bucket_rule() {
        ok(
            &S3_BUCKET,
            &["kfaws-ml-us-east-1-artifacts", "a.b-c", "abc"],
            &[
                "ab",
                "Kfaws-ML",
                "my..bucket",
                "my_bucket",
                "-bucket",
                "bucket-",
                "192.168.5.4",
                "xn--bucket",
                "sthree-bucket",
                "bucket-s3alias",
                "bucket--ol-s3",
                &"b".repeat(64),
            ],
        );
    }

    #[test]
    fn kubernetes_rules() {
        ok(
            &DNS1123_LABEL,
            &["kubeflow-user-example-com", "a", "0a"],
            &["Kubeflow", "ml_team", "a.b", "-a", "a-", &"a".repeat(64)],
        );
        ok(
            &DNS1123_SUBDOMAIN,
            &["efs.csi.aws.com", "kfaws-ml"],
            &["kfaws_ml", "a..b", "A.b"],
        );
        ok(&RFC1035_LABEL, &["ml-train-1"], &["1ml", "ml.train"]);
    }

    #[test]
    fn sagemaker_job_rule() {
        ok(
            &SAGEMAKER_JOB,
            &["ml-20261130-042000", "a--b", &"j".repeat(63)],
            &[
                "health_and_personal_care_inter_title-2018-09-06-05-57-49-470",
                "-job",
                "job-",
                &"j".repeat(64),
            ],
        );
    }

    #[test]
    fn mismatches_name_the_offending_characters_or_position() {
        assert_eq!(
            CFN_STACK.violation("kfaws-ml_team-x").unwrap(),
            "it contains '_' (not allowed)"
        );
        assert_eq!(
            DNS1123_LABEL.violation("Team_A").unwrap(),
            "it contains 'A', 'T', '_' (not allowed)"
        );
        assert_eq!(
            CFN_STACK.violation("1stack").unwrap(),
            "it may not start with '1'"
        );
        assert_eq!(
            DNS1123_LABEL.violation("team-").unwrap(),
            "it may not end with '-'"
        );
    }

    #[test]
    fn error_names_field_derived_name_rule_and_source() {
        let n = DerivedName {
            field: "name".into(),
            input: "test-k8_cluster01".into(),
            value: "kfaws-test-k8_cluster01-network".into(),
            rule: &CFN_STACK,
        };
        let e = n.problem().unwrap();
        let msg = e.to_string();
        assert!(msg.contains("name \"test-k8_cluster01\""), "{msg}");
        assert!(msg.contains("\"kfaws-test-k8_cluster01-network\""), "{msg}");
        assert!(msg.contains("[a-zA-Z][-a-zA-Z0-9]*"), "{msg}");
        assert!(msg.contains("CreateStack"), "{msg}");
        assert_eq!(e.longest_input, None);
    }

    #[test]
    fn too_long_names_report_the_longest_input() {
        let input = "tf-vanilla-uwiqgwfqu3";
        let n = DerivedName {
            field: "name".into(),
            input: input.into(),
            value: format!("kfaws-{input}-ap-southeast-1-irsa-efs-csi-controller"),
            rule: &IAM_ROLE,
        };
        let e = n.problem().unwrap();
        assert_eq!(e.longest_input, Some(64 - (n.value.len() - input.len())));
        assert!(e.to_string().contains("may be at most"), "{e}");
    }
}
