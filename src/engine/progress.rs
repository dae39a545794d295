//! Progress reporting for apply and destroy: a live line per running
//! resource with its elapsed time on a terminal (indicatif), timestamped
//! plain lines otherwise, and a final table of what was done.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::exec::ApplyReport;
use super::walk::Outcome;
use crate::address::Address;
use crate::plan::Step;

/// Receives the executor's events. Implementations must be cheap: they are
/// called from the resource jobs.
pub trait Progress: Send + Sync {
    /// A resource's job started.
    fn started(&self, address: &Address, step: Step);
    /// A resource's job ended after `elapsed`: [`Outcome::Succeeded`],
    /// [`Outcome::Failed`] or [`Outcome::Interrupted`].
    fn finished(&self, address: &Address, step: Step, outcome: &Outcome, elapsed: Duration);
    /// What a running resource's job waits for changed (`CREATING`,
    /// `DELETE_IN_PROGRESS`, `waiting for instance i-… to go`): see
    /// [`report_status`].
    fn status(&self, _address: &Address, _status: &str) {}
    /// An AWS call of a running resource's job is being retried after a
    /// failed attempt (`Some`: which call, which attempt, why), or its
    /// retries ended (`None`): see [`report_retry`]. Shown beside the
    /// status, which it does not replace.
    fn retry(&self, _address: &Address, _retry: Option<&str>) {}
}

/// The resource job a task runs: where [`report_status`] and
/// [`report_retry`] send what they are told.
#[derive(Clone)]
pub struct Scope {
    /// The progress display.
    pub progress: Arc<dyn Progress>,
    /// The job's resource.
    pub address: Address,
}

tokio::task_local! {
    /// Set by the executor around each resource's job.
    pub static SCOPE: Scope;
}

/// Reports what the current resource job is waiting for to its progress
/// display (the executor scopes [`SCOPE`] around each job). Outside a job,
/// or in a task the job spawned, it does nothing.
pub fn report_status(status: &str) {
    let _ = SCOPE.try_with(|s| s.progress.status(&s.address, status));
}

/// Reports that an AWS call of the current resource job is being retried
/// (`Some`), or that its retries ended (`None`), to its progress display
/// ([`Progress::retry`]); called by the SDK clients' retry notice
/// ([`crate::aws::clients::RetryNotice`]). Outside a job it does nothing.
pub fn report_retry(retry: Option<&str>) {
    let _ = SCOPE.try_with(|s| s.progress.retry(&s.address, retry));
}

/// Discards every event (tests, `--quiet` callers).
#[derive(Debug, Default)]
pub struct Silent;

impl Progress for Silent {
    fn started(&self, _: &Address, _: Step) {}
    fn finished(&self, _: &Address, _: Step, _: &Outcome, _: Duration) {}
}

fn doing(step: Step) -> &'static str {
    match step {
        Step::Create => "Creating",
        Step::Import => "Importing",
        Step::Update => "Modifying",
        Step::Replace => "Replacing",
        Step::Delete => "Destroying",
        Step::Forget => "Removing from the state (already gone)",
        Step::Keep => "Recording as created again (an earlier delete did not take effect)",
        Step::Read => "Reading",
        Step::NoOp => "Checking",
    }
}

fn done(step: Step) -> &'static str {
    match step {
        Step::Create => "Creation complete",
        Step::Import => "Import complete",
        Step::Update => "Modifications complete",
        Step::Replace => "Replacement complete",
        Step::Delete => "Destruction complete",
        Step::Forget => "Removed from the state (already gone)",
        Step::Keep => "Recorded as created again",
        Step::Read => "Read complete",
        Step::NoOp => "Checked",
    }
}

/// How often a plain-line console says a resource is still in progress
/// (Terraform's "Still creating... [10s elapsed]" lines, at its interval).
pub const STILL_EVERY: Duration = Duration::from_secs(10);

/// A running resource: the step, when it started, how many
/// [`STILL_EVERY`] intervals a plain-line console has reported, the last
/// status its job reported and the AWS call it is retrying, if any.
struct Run {
    step: Step,
    started: Instant,
    reported: u64,
    status: Option<String>,
    retry: Option<String>,
}

impl Run {
    /// What the job says it is doing, for the spinner and the plain lines:
    /// the status, then the retry, as `(DELETING; retrying …)`.
    fn note(&self) -> String {
        let parts: Vec<&str> = [self.status.as_deref(), self.retry.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        match parts.is_empty() {
            true => String::new(),
            false => format!(" ({})", parts.join("; ")),
        }
    }
}

/// The running resources, by address.
type Running = Mutex<BTreeMap<Address, Run>>;

/// The spinners on screen now, if any: [`LogWriter`] hides them while it
/// writes a log line.
static ON_SCREEN: Mutex<Option<MultiProgress>> = Mutex::new(None);

/// A writer for log lines (a `tracing_subscriber` `MakeWriter` as
/// `|| LogWriter`): writes to stderr with the spinners of a [`Console`]
/// hidden meanwhile and redrawn after, so a warning logged during an apply
/// is not broken up by a spinner's line on the same terminal. Without
/// spinners (not a terminal) it writes straight to stderr.
#[derive(Debug, Default)]
pub struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let write = || std::io::stderr().lock().write_all(buf);
        let multi = ON_SCREEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match multi {
            Some(multi) => multi.suspend(write)?,
            None => write()?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Prints progress to stdout: spinners on a terminal, lines otherwise.
pub struct Console {
    bars: Option<(MultiProgress, Mutex<BTreeMap<Address, ProgressBar>>)>,
    running: Arc<Running>,
}

/// A timestamped progress line on stdout. A closed stdout must not stop an
/// apply: progress is best effort.
fn plain_line(text: &str) {
    use std::io::Write as _;
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ");
    let _ = writeln!(std::io::stdout().lock(), "{now} {text}");
}

/// The "still in progress" lines due now, advancing each entry's count.
fn still_lines(running: &Running, now: Instant) -> Vec<String> {
    let mut running = running
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    running
        .iter_mut()
        .filter_map(|(address, run)| {
            let elapsed = now.saturating_duration_since(run.started);
            let due = elapsed.as_secs() / STILL_EVERY.as_secs();
            (due > run.reported).then(|| {
                run.reported = due;
                format!(
                    "{address}: Still {}... [{}s elapsed]{}",
                    doing(run.step).to_lowercase(),
                    due * STILL_EVERY.as_secs(),
                    run.note()
                )
            })
        })
        .collect()
}

impl Console {
    /// Spinners when stdout is a terminal; otherwise plain timestamped lines,
    /// and every [`STILL_EVERY`] a line for each resource still in progress,
    /// so a long wait (a cluster, a webhook's backend) is never silent.
    pub fn new() -> Self {
        let bars = std::io::stdout().is_terminal().then(|| {
            (
                MultiProgress::with_draw_target(ProgressDrawTarget::stdout()),
                Mutex::new(BTreeMap::new()),
            )
        });
        if let Some((multi, _)) = &bars {
            *ON_SCREEN
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(multi.clone());
        }
        let running: Arc<Running> = Arc::default();
        if bars.is_none() {
            // Ends with the console: it holds the only strong reference.
            let weak = Arc::downgrade(&running);
            std::thread::spawn(move || loop {
                std::thread::sleep(Duration::from_millis(500));
                let Some(running) = weak.upgrade() else { break };
                for line in still_lines(&running, Instant::now()) {
                    plain_line(&line);
                }
            });
        }
        Self { bars, running }
    }

    /// Changes what the running resource at `address` says (`change`), and
    /// puts it on its spinner, if any.
    fn note(&self, address: &Address, change: impl FnOnce(&mut Run)) {
        let mut running = self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(run) = running.get_mut(address) else {
            return;
        };
        change(run);
        if let Some((_, bars)) = &self.bars {
            if let Some(bar) = bars.lock().expect("not poisoned").get(address) {
                bar.set_message(format!("{}{}", doing(run.step), run.note()));
            }
        }
    }

    fn line(&self, text: String) {
        match &self.bars {
            Some((multi, _)) => {
                let _ = multi.println(text);
            }
            None => plain_line(&text),
        }
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        if self.bars.is_some() {
            *ON_SCREEN
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        }
    }
}

impl Default for Console {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress for Console {
    fn started(&self, address: &Address, step: Step) {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                address.clone(),
                Run {
                    step,
                    started: Instant::now(),
                    reported: 0,
                    status: None,
                    retry: None,
                },
            );
        match &self.bars {
            Some((multi, bars)) => {
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {prefix}: {msg}... [{elapsed}]")
                        .expect("the template is valid"),
                );
                bar.set_prefix(address.to_string());
                bar.set_message(doing(step));
                bar.enable_steady_tick(Duration::from_millis(120));
                bars.lock()
                    .expect("not poisoned")
                    .insert(address.clone(), bar);
            }
            None => self.line(format!("{address}: {}...", doing(step))),
        }
    }

    fn status(&self, address: &Address, status: &str) {
        self.note(address, |run| run.status = Some(status.to_string()));
    }

    fn retry(&self, address: &Address, retry: Option<&str>) {
        self.note(address, |run| run.retry = retry.map(str::to_string));
    }

    fn finished(&self, address: &Address, step: Step, outcome: &Outcome, elapsed: Duration) {
        if let Some((multi, bars)) = &self.bars {
            if let Some(bar) = bars.lock().expect("not poisoned").remove(address) {
                bar.finish_and_clear();
                multi.remove(&bar);
            }
        }
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(address);
        let secs = elapsed.as_secs_f64();
        match outcome {
            Outcome::Interrupted(e) => {
                self.line(format!("{address}: interrupted after {secs:.1}s: {e}"));
            }
            Outcome::Failed(e) => self.line(format!("{address}: failed after {secs:.1}s: {e}")),
            _ => self.line(format!("{address}: {} after {secs:.1}s", done(step))),
        }
    }
}

/// The final table: address, step, result and duration of every change,
/// then the errors, each upstream failure reported once with what it skipped.
pub fn report_table(report: &ApplyReport) -> String {
    let mut table = Table::new();
    table.load_style(UTF8_BORDERS_ONLY);
    table.set_header(["Resource", "Action", "Result", "Duration"]);
    for r in &report.results {
        let result = match &r.outcome {
            Outcome::Succeeded => "done".to_string(),
            Outcome::Failed(_) => "FAILED".to_string(),
            Outcome::UpstreamFailed(root) => format!("skipped: upstream {root} failed"),
            Outcome::NotStarted => "not started (interrupted)".to_string(),
            Outcome::Interrupted(_) => "interrupted (resumes on the next run)".to_string(),
        };
        let took = r
            .elapsed
            .map(|d| format!("{:.1}s", d.as_secs_f64()))
            .unwrap_or_else(|| "-".into());
        table.add_row([
            r.address.to_string(),
            r.step.as_str().to_string(),
            result,
            took,
        ]);
    }
    let mut out = table.to_string();
    out.push('\n');
    for r in &report.results {
        if let Outcome::Interrupted(e) = &r.outcome {
            out.push_str(&format!("Interrupted: {}: {e}\n", r.address));
        }
        if let Outcome::Failed(e) = &r.outcome {
            let skipped: Vec<String> = report
                .results
                .iter()
                .filter(|s| s.outcome == Outcome::UpstreamFailed(r.address.clone()))
                .map(|s| s.address.to_string())
                .collect();
            out.push_str(&format!("Error: {}: {e}\n", r.address));
            if !skipped.is_empty() {
                out.push_str(&format!(
                    "  (upstream failed: {} not attempted)\n",
                    skipped.join(", ")
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_resource_is_reported_once_per_interval() {
        let running = Running::default();
        let t0 = Instant::now();
        let address: Address = "k8s.kubeflow".parse().unwrap();
        running.lock().unwrap().insert(
            address.clone(),
            Run {
                step: Step::Update,
                started: t0,
                reported: 0,
                status: None,
                retry: None,
            },
        );
        assert!(still_lines(&running, t0 + Duration::from_secs(9)).is_empty());
        assert_eq!(
            still_lines(&running, t0 + Duration::from_secs(10)),
            ["k8s.kubeflow: Still modifying... [10s elapsed]"]
        );
        assert!(still_lines(&running, t0 + Duration::from_secs(15)).is_empty());
        // A late tick reports the last interval reached, once.
        assert_eq!(
            still_lines(&running, t0 + Duration::from_secs(31)),
            ["k8s.kubeflow: Still modifying... [30s elapsed]"]
        );
        // What the job waits for, once it says, is on the line.
        running.lock().unwrap().get_mut(&address).unwrap().status =
            Some("waiting for instance i-1 to go".into());
        assert_eq!(
            still_lines(&running, t0 + Duration::from_secs(40)),
            ["k8s.kubeflow: Still modifying... [40s elapsed] (waiting for instance i-1 to go)"]
        );
        // A retried call is said beside the status, until its retries end.
        running.lock().unwrap().get_mut(&address).unwrap().retry =
            Some("retrying EKS DeleteNodegroup".into());
        assert_eq!(
            still_lines(&running, t0 + Duration::from_secs(50)),
            [
                "k8s.kubeflow: Still modifying... [50s elapsed] (waiting for instance i-1 to go; \
                 retrying EKS DeleteNodegroup)"
            ]
        );
        let run = &mut *running.lock().unwrap();
        let run = run.get_mut(&address).unwrap();
        run.status = None;
        assert_eq!(run.note(), " (retrying EKS DeleteNodegroup)");
        run.retry = None;
        assert_eq!(run.note(), "");
    }

    /// What a job reports (its status, a retry) reaches that job's resource;
    /// outside any job it goes nowhere.
    #[tokio::test]
    async fn a_status_reported_in_a_job_reaches_its_resource() {
        #[derive(Default)]
        struct Seen(Mutex<Vec<String>>);
        impl Progress for Seen {
            fn started(&self, _: &Address, _: Step) {}
            fn finished(&self, _: &Address, _: Step, _: &Outcome, _: Duration) {}
            fn status(&self, address: &Address, status: &str) {
                self.0.lock().unwrap().push(format!("{address}: {status}"));
            }
            fn retry(&self, address: &Address, retry: Option<&str>) {
                self.0
                    .lock()
                    .unwrap()
                    .push(format!("{address}: retry {retry:?}"));
            }
        }
        let seen = Arc::new(Seen::default());
        report_status("nobody listens");
        report_retry(Some("nobody listens"));
        let scope = Scope {
            progress: Arc::clone(&seen) as Arc<dyn Progress>,
            address: "eks.cluster".parse().unwrap(),
        };
        SCOPE
            .scope(scope, async {
                report_status("CREATING");
                report_retry(Some("retrying EKS CreateCluster"));
                report_retry(None);
            })
            .await;
        assert_eq!(
            *seen.0.lock().unwrap(),
            [
                "eks.cluster: CREATING",
                "eks.cluster: retry Some(\"retrying EKS CreateCluster\")",
                "eks.cluster: retry None"
            ]
        );
    }
}
