//! Waiting for a resource to reach a state: poll with exponential backoff
//! until a terminal state or a deadline, keeping the history of the
//! statuses seen so a timeout or failure can say where it got stuck.
//!
//! The readiness decision is the caller's ([`Poll`]); this module only
//! schedules polls. The delay between polls is a fixed share
//! ([`OVERSHOOT`]) of the time waited so far, between [`Backoff::initial`]
//! and [`Backoff::max`]: a wait then ends at most 2 % (or `max`) after the
//! resource became ready, whether it takes two seconds or twenty minutes,
//! and a long wait polls no more often than every `max` (AWS SDK waiters
//! poll EKS and CloudFormation every 15–30 s).

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

/// What one poll found.
#[derive(Debug)]
pub enum Poll<T> {
    /// The wait is over.
    Ready(T),
    /// Not yet; the status seen (recorded in the history when it changes).
    Pending(String),
    /// A terminal failure; the message.
    Failed(String),
}

/// The delay before the next poll as a share of the time waited so far:
/// at most this fraction is added to any wait shorter than `max / OVERSHOOT`.
pub const OVERSHOOT: f64 = 0.02;

/// The polling schedule.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// First delay between polls.
    pub initial: Duration,
    /// Longest delay between polls.
    pub max: Duration,
    /// Give up after this long.
    pub deadline: Duration,
}

impl Backoff {
    /// The delay before the next poll after `elapsed` of waiting:
    /// `elapsed × OVERSHOOT`, clamped to `[initial, max]`.
    pub fn delay(&self, elapsed: Duration) -> Duration {
        elapsed
            .mul_f64(OVERSHOOT)
            .clamp(self.initial, self.max.max(self.initial))
    }

    /// 100 ms growing to 10 s, for `deadline`.
    pub fn with_deadline(deadline: Duration) -> Self {
        Self {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(10),
            deadline,
        }
    }
}

/// Status transitions seen while waiting, with the time since the wait began.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History(pub Vec<(Duration, String)>);

impl History {
    /// ` (statuses: A at 0s → B at 30s)`, or nothing when no status was seen
    /// before the end: for the end of an error message.
    pub fn suffix(&self) -> String {
        match self.0.is_empty() {
            true => String::new(),
            false => format!(" (statuses: {self})"),
        }
    }
}

impl fmt::Display for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(t, s)| format!("{s} at {:.0}s", t.as_secs_f64()))
            .collect();
        f.write_str(&parts.join(" → "))
    }
}

/// Why a wait ended without the resource being ready.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// A terminal failure.
    #[error("{message}{}", .history.suffix())]
    Failed {
        /// The failure.
        message: String,
        /// What was seen before it.
        history: History,
    },
    /// The deadline passed.
    #[error("still not ready after {}s{}", .after.as_secs(), .history.suffix())]
    TimedOut {
        /// The deadline.
        after: Duration,
        /// What was seen.
        history: History,
    },
}

/// Polls `poll` on `schedule` until it is ready, fails, or the deadline passes. Every wait
/// polls at least once. A poll that does not answer (a `Describe*` call stalled on a
/// connection the SDK set no read timeout for) is given until the deadline, or the longest
/// delay between polls (`schedule.max`) when less is left.
///
/// # Errors
/// [`WaitError`] with the status history.
pub async fn wait_until<T, F, Fut>(schedule: Backoff, mut poll: F) -> Result<T, WaitError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Poll<T>>,
{
    let start = Instant::now();
    let deadline = tokio::time::Instant::from_std(start + schedule.deadline);
    let mut history = History::default();
    loop {
        let bound = deadline.max(tokio::time::Instant::now() + schedule.max);
        let Ok(polled) = tokio::time::timeout_at(bound, poll()).await else {
            break;
        };
        match polled {
            Poll::Ready(v) => return Ok(v),
            Poll::Failed(message) => return Err(WaitError::Failed { message, history }),
            Poll::Pending(status) => {
                if history.0.last().map(|(_, s)| s) != Some(&status) {
                    crate::engine::progress::report_status(&status);
                    history.0.push((start.elapsed(), status));
                }
            }
        }
        let left = schedule.deadline.saturating_sub(start.elapsed());
        if left.is_zero() {
            break;
        }
        tokio::time::sleep(schedule.delay(start.elapsed()).min(left)).await;
    }
    Err(WaitError::TimedOut {
        after: schedule.deadline,
        history,
    })
}

/// A wait that tolerates a few failed polls in a row (after the SDK's own
/// retries): a throttled or failing `Describe*` is no reason to give up on
/// a cluster that takes ten minutes, nor on a training job that takes hours.
#[derive(Debug, Default)]
pub struct Tolerance(std::sync::atomic::AtomicU32);

impl Tolerance {
    /// Failed polls in a row tolerated before the wait fails.
    pub const LIMIT: u32 = 3;

    /// `Pending` for the first [`Self::LIMIT`] failures in a row, then `Failed`.
    pub fn failed<T>(&self, message: String) -> Poll<T> {
        if self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < Self::LIMIT {
            Poll::Pending(format!("polling failing ({message})"))
        } else {
            Poll::Failed(message)
        }
    }

    /// A poll that succeeded resets the count.
    pub fn ok(&self) {
        self.0.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fast(deadline_ms: u64) -> Backoff {
        Backoff {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(4),
            deadline: Duration::from_millis(deadline_ms),
        }
    }

    #[tokio::test]
    async fn returns_when_ready_and_records_transitions_once() {
        let mut n = 0;
        let v = wait_until(fast(1000), || {
            n += 1;
            let r = match n {
                1 | 2 => Poll::Pending("CREATING".to_string()),
                _ => Poll::Ready(n),
            };
            async move { r }
        })
        .await
        .unwrap();
        assert_eq!(v, 3);
    }

    #[tokio::test]
    async fn failure_carries_the_history() {
        let mut n = 0;
        let e = wait_until(fast(1000), || {
            n += 1;
            let r: Poll<()> = match n {
                1 | 2 => Poll::Pending("CREATE_IN_PROGRESS".into()),
                3 => Poll::Pending("ROLLBACK_IN_PROGRESS".into()),
                _ => Poll::Failed("Vpc: CREATE_FAILED: limit exceeded".into()),
            };
            async move { r }
        })
        .await
        .unwrap_err();
        let WaitError::Failed { message, history } = &e else {
            panic!("{e}")
        };
        assert_eq!(message, "Vpc: CREATE_FAILED: limit exceeded");
        let seen: Vec<&str> = history.0.iter().map(|(_, s)| s.as_str()).collect();
        assert_eq!(seen, ["CREATE_IN_PROGRESS", "ROLLBACK_IN_PROGRESS"]);
        assert!(
            e.to_string()
                .contains("CREATE_IN_PROGRESS at 0s → ROLLBACK_IN_PROGRESS"),
            "{e}"
        );
    }

    #[test]
    fn polls_add_at_most_two_percent_or_the_maximum_delay() {
        let b = Backoff::with_deadline(Duration::from_secs(3600));
        assert_eq!(b.delay(Duration::ZERO), Duration::from_millis(100));
        assert_eq!(b.delay(Duration::from_secs(1)), Duration::from_millis(100));
        assert_eq!(b.delay(Duration::from_secs(30)), Duration::from_millis(600));
        assert_eq!(b.delay(Duration::from_secs(600)), Duration::from_secs(10));
    }

    #[tokio::test]
    async fn a_wait_without_time_polls_once() {
        let mut n = 0;
        let e = wait_until(fast(0), || {
            n += 1;
            async {
                tokio::time::sleep(Duration::from_millis(2)).await;
                Poll::<()>::Pending("CREATING".into())
            }
        })
        .await
        .unwrap_err();
        assert!(
            matches!(&e, WaitError::TimedOut { history, .. } if history.0.len() == 1),
            "{e}"
        );
        assert_eq!(n, 1);
    }

    #[tokio::test]
    async fn a_poll_that_never_answers_ends_at_the_deadline() {
        let e = wait_until(fast(30), std::future::pending::<Poll<()>>)
            .await
            .unwrap_err();
        assert!(matches!(&e, WaitError::TimedOut { .. }), "{e}");
    }

    #[tokio::test]
    async fn gives_up_at_the_deadline() {
        let e = wait_until(fast(30), || async {
            Poll::<()>::Pending("CREATING".into())
        })
        .await
        .unwrap_err();
        assert!(
            matches!(&e, WaitError::TimedOut { history, .. } if history.0.len() == 1),
            "{e}"
        );
    }
}
