//! A training job's final metrics, read the same way on every runtime and
//! printed the same way (`Final metrics: epoch=2 train_loss=0.3589 …`).
//!
//! SageMaker records a job's metrics by applying the metric definitions'
//! regexes ([`METRICS`]) to its log; the local and Kubernetes runtimes read
//! the same fields from the trainer's last metric line, so the three print the
//! same names, in the same order, with the same precision (those two also show
//! a diverged run's `NaN`, which SageMaker's numeric metrics cannot record).

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
    /// The metrics of one trainer metric line ([`is_metrics_line`]): each
    /// field of [`METRICS`] given as `name=value` in it, parsed as a number.
    /// Values are those the SageMaker metric definitions read, and also the
    /// non-finite ones Rust prints (`NaN`, `inf`, `-inf`: a diverged run's
    /// loss), which are shown rather than dropped; `epoch` is read whatever
    /// follows it, so the trainer's summary line (`epoch=2 test_loss=…;
    /// test_acc=…;`) gives its epoch too. Fields not found are absent; a line
    /// that is not a metric line gives no metrics.
    pub fn from_line(line: &str) -> Self {
        let mut metrics = BTreeMap::new();
        if !is_metrics_line(line) {
            return Self(metrics);
        }
        for (name, _) in METRICS {
            // A field starts the line or follows a space; its value ends at `;`, a space
            // or the line's end.
            let pattern =
                format!(r"(?:^|\s){name}=(-?(?:[0-9.]+|(?i:nan|inf|infinity)))(?:;|\s|$)");
            let re = regex_lite::Regex::new(&pattern).expect("METRICS names are plain words");
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

    /// A diverged run's `NaN` (and an infinite loss) is shown, not silently dropped.
    #[test]
    fn non_finite_values_are_read_and_shown() {
        let line = "epoch=3 train_loss=NaN; train_acc=0.1000; test_loss=inf; test_acc=0.1000; \
                    images_per_sec=4000;";
        let m = FinalMetrics::from_line(line);
        assert!(m.get("train_loss").is_some_and(f64::is_nan), "{m:?}");
        assert_eq!(m.get("test_loss"), Some(f64::INFINITY));
        assert_eq!(
            m.to_string(),
            "epoch=3 train_loss=NaN train_acc=0.1 test_loss=inf test_acc=0.1 images_per_sec=4000"
        );
        let m = FinalMetrics::from_line("epoch=1 train_loss=-inf; test_acc=0.1;");
        assert_eq!(m.get("train_loss"), Some(f64::NEG_INFINITY));
    }

    /// The trainer's summary line (after a model-only evaluation) names no `train_loss`,
    /// yet its epoch is read.
    #[test]
    fn the_summary_line_gives_its_epoch() {
        let m = FinalMetrics::from_line("epoch=2 test_loss=0.3911; test_acc=0.8634;");
        assert_eq!(m.to_string(), "epoch=2 test_loss=0.3911 test_acc=0.8634");
    }

    /// A field name inside another (`epochs=`) or a malformed value is no metric.
    #[test]
    fn only_whole_fields_with_numbers_count() {
        let m = FinalMetrics::from_line("epoch=2 xtest_loss=1.0; test_loss=abc; test_acc=0.5;");
        assert_eq!(m.to_string(), "epoch=2 test_acc=0.5");
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
