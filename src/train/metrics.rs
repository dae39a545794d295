//! A training job's final metrics, read the same way on every runtime and
//! printed the same way (`Final metrics: epoch=2 train_loss=0.3589 …`).
//!
//! SageMaker records a job's metrics by applying the metric definitions'
//! regexes ([`METRICS`]) to its log; the local and Kubernetes runtimes apply
//! the same regexes to the trainer's last epoch line, so the three print the
//! same names, in the same order, with the same precision.

use std::collections::BTreeMap;
use std::fmt;

use crate::sagemaker::training::METRICS;

/// Whether `line` is one of the trainer's per-epoch metric lines
/// (`epoch=2 train_loss=0.4123; … test_acc=0.8634; …`), the stable format
/// SageMaker metric definitions match (issue #4).
pub fn is_metrics_line(line: &str) -> bool {
    line.starts_with("epoch=") && line.contains("test_acc=")
}

/// Metric values by name: the trainer's epoch-line fields (`epoch`,
/// `train_loss`, `train_acc`, `test_loss`, `test_acc`, `images_per_sec`;
/// accuracies are fractions in 0–1, throughput in images per second), or
/// SageMaker's `FinalMetricDataList` (DescribeTrainingJob), which holds the
/// same names because kfaws defines them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FinalMetrics(BTreeMap<String, f64>);

impl FinalMetrics {
    /// The metrics of one trainer epoch line, found with the regexes of the
    /// SageMaker metric definitions ([`METRICS`]): each regex's first capture
    /// group, parsed as a number. Fields a regex does not find are absent;
    /// a line that is not a metric line gives no metrics.
    pub fn from_line(line: &str) -> Self {
        let mut metrics = BTreeMap::new();
        for (name, pattern) in METRICS {
            let re = regex_lite::Regex::new(pattern).expect("METRICS regexes are valid");
            let value = re
                .captures(line)
                .and_then(|c| c.get(1))
                .and_then(|m| m.as_str().parse::<f64>().ok());
            if let Some(v) = value {
                metrics.insert(name.to_string(), v);
            }
        }
        Self(metrics)
    }

    /// Whether no metric was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of metric `name`, if recorded.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.0.get(name).copied()
    }
}

impl From<BTreeMap<String, f64>> for FinalMetrics {
    fn from(metrics: BTreeMap<String, f64>) -> Self {
        Self(metrics)
    }
}

/// `name=value` pairs separated by spaces: the trainer's fields first, in the
/// order its epoch line prints them ([`METRICS`]), then any other name in
/// alphabetical order. Values keep at most 4 decimals (the trainer prints 4;
/// SageMaker stores 32-bit floats, whose 0.8605 reads back 0.86049998),
/// without trailing zeros.
impl fmt::Display for FinalMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known = METRICS.iter().map(|(n, _)| *n);
        let others = self
            .0
            .keys()
            .map(String::as_str)
            .filter(|k| !METRICS.iter().any(|(n, _)| n == k));
        let mut first = true;
        for name in known.chain(others) {
            let Some(v) = self.get(name) else { continue };
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            let s = format!("{v:.4}");
            let s = s.trim_end_matches('0').trim_end_matches('.');
            write!(f, "{name}={s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "epoch=2 train_loss=0.3589; train_acc=0.8677; test_loss=0.3636; \
                        test_acc=0.8669; images_per_sec=4582;";

    #[test]
    fn a_trainer_line_reads_every_field() {
        let m = FinalMetrics::from_line(LINE);
        assert_eq!(m.get("epoch"), Some(2.0));
        assert_eq!(m.get("train_loss"), Some(0.3589));
        assert_eq!(m.get("train_acc"), Some(0.8677));
        assert_eq!(m.get("test_loss"), Some(0.3636));
        assert_eq!(m.get("test_acc"), Some(0.8669));
        assert_eq!(m.get("images_per_sec"), Some(4582.0));
    }

    #[test]
    fn other_lines_give_no_metrics() {
        assert!(FinalMetrics::from_line("training 2 epochs=3 on fashion-mnist").is_empty());
        assert!(!is_metrics_line("training 2 epochs=3 on fashion-mnist"));
        assert!(is_metrics_line(LINE));
    }

    #[test]
    fn printed_in_the_trainer_order_whatever_the_source() {
        let from_line = FinalMetrics::from_line(LINE).to_string();
        assert_eq!(
            from_line,
            "epoch=2 train_loss=0.3589 train_acc=0.8677 test_loss=0.3636 test_acc=0.8669 \
             images_per_sec=4582"
        );
        // SageMaker's FinalMetricDataList: the same names, stored as f32.
        let sagemaker: BTreeMap<String, f64> = [
            ("test_acc", 0.8669_f32),
            ("epoch", 2.0),
            ("images_per_sec", 4582.0),
            ("train_acc", 0.8677),
            ("train_loss", 0.3589),
            ("test_loss", 0.3636),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), f64::from(v)))
        .collect();
        assert_eq!(FinalMetrics::from(sagemaker).to_string(), from_line);
    }

    #[test]
    fn unknown_names_follow_alphabetically() {
        let m: BTreeMap<String, f64> = [("zeta", 1.5), ("alpha", 0.25), ("epoch", 3.0)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(
            FinalMetrics::from(m).to_string(),
            "epoch=3 alpha=0.25 zeta=1.5"
        );
    }
}
