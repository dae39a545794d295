//! Epoch metrics and their stable text form, one line per epoch on stdout, e.g.
//! `epoch=2 train_loss=0.4123; train_acc=0.8512; test_loss=0.3911; test_acc=0.8634; images_per_sec=5120;`
//! A SageMaker metric definition matches a figure with a regex such as `test_acc=([0-9.]+);`.

/// Figures of one epoch, identical on every rank (all-reduced).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct EpochMetrics {
    /// Epoch number, from 1.
    pub epoch: u64,
    /// Mean cross-entropy over the epoch's training examples (all ranks).
    pub train_loss: f64,
    /// Fraction of training examples classified correctly while training.
    pub train_acc: f64,
    /// Mean cross-entropy over the test set.
    pub test_loss: f64,
    /// Fraction of the test set classified correctly.
    pub test_acc: f64,
    /// Training images processed per second of wall time, all ranks together.
    pub images_per_sec: f64,
}

impl EpochMetrics {
    /// The metrics line (no trailing newline).
    pub fn line(&self) -> String {
        format!(
            "epoch={} train_loss={:.4}; train_acc={:.4}; test_loss={:.4}; test_acc={:.4}; images_per_sec={:.0};",
            self.epoch, self.train_loss, self.train_acc, self.test_loss, self.test_acc, self.images_per_sec
        )
    }
}

/// Running sums of a pass, all-reduced as one vector `[loss_sum, correct, count]`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tally {
    /// Sum over examples of their cross-entropy.
    pub loss_sum: f64,
    /// Examples classified correctly.
    pub correct: f64,
    /// Examples seen.
    pub count: f64,
}

impl Tally {
    /// Adds a batch of `count` examples with mean loss `mean_loss` and `correct` right answers.
    pub fn add(&mut self, mean_loss: f64, correct: usize, count: usize) {
        self.loss_sum += mean_loss * count as f64;
        self.correct += correct as f64;
        self.count += count as f64;
    }

    /// Mean loss and accuracy (0 when empty).
    pub fn means(&self) -> (f64, f64) {
        if self.count == 0.0 {
            (0.0, 0.0)
        } else {
            (self.loss_sum / self.count, self.correct / self.count)
        }
    }

    /// As a vector for the all-reduce.
    pub fn to_vec(self) -> Vec<f32> {
        vec![self.loss_sum as f32, self.correct as f32, self.count as f32]
    }

    /// From an all-reduced vector.
    pub fn from_slice(v: &[f32]) -> Self {
        Self {
            loss_sum: f64::from(v[0]),
            correct: f64::from(v[1]),
            count: f64::from(v[2]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_has_the_documented_shape() {
        let m = EpochMetrics {
            epoch: 2,
            train_loss: 0.41234,
            train_acc: 0.85119,
            test_loss: 0.3911,
            test_acc: 0.86341,
            images_per_sec: 5120.4,
        };
        assert_eq!(
            m.line(),
            "epoch=2 train_loss=0.4123; train_acc=0.8512; test_loss=0.3911; test_acc=0.8634; images_per_sec=5120;"
        );
    }

    #[test]
    fn tally_weights_batches_by_size() {
        let mut t = Tally::default();
        t.add(1.0, 3, 4);
        t.add(0.5, 2, 2);
        let (loss, acc) = t.means();
        assert!((loss - 5.0 / 6.0).abs() < 1e-12);
        assert!((acc - 5.0 / 6.0).abs() < 1e-12);
        assert_eq!(Tally::from_slice(&t.to_vec()), t);
        assert_eq!(Tally::default().means(), (0.0, 0.0));
    }
}
