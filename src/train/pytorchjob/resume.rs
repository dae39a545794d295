//! Continuing a PyTorchJob's checkpoints in a new one (`kfaws train --runtime kubernetes
//! --resume-from JOB`).
//!
//! A job's checkpoints lie on the deployment's EFS file system, in the directory its replicas'
//! `TRAINER_CHECKPOINT_DIR` names ([`PyTorchJobSpec::checkpoints`]), and stay there when the
//! job fails or is deleted. A PyTorchJob's name cannot be used again while the job exists, so
//! an ended job is continued by a new job whose replicas checkpoint into that same directory,
//! with `TRAINER_REQUIRE_CHECKPOINT` set so that its trainer refuses to start again from the
//! first epoch when nothing there reads back (a job that failed before its first checkpoint).
//! The rules of a SageMaker `--resume-from` hold ([`crate::sagemaker::resume`]): the job must
//! have ended, no other running job may write the same directory, and the world size, the data
//! and the hyperparameters that fix each epoch's shards must be the same
//! ([`crate::train::resume`]).
//!
//! [`PyTorchJobSpec::checkpoints`]: super::PyTorchJobSpec::checkpoints

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams};
use kube::Client;
use serde_json::Value;

use super::{conditions, kube_err, resource, PyTorchJobError, EFS_MOUNT};
use crate::train::resume;

/// Where a PyTorchJob stands, from its `status.conditions` (the training operator's
/// `JobConditionType`s, Kubeflow Training Operator API `kubeflow.org/v1`): `Succeeded` or
/// `Failed` once one is `True`, else the newest `True` condition, else [`JobState::Pending`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// No condition is `True` yet (the operator has not seen the job).
    Pending,
    /// `Created`: the operator made its replicas' Pods and Services.
    Created,
    /// `Running`: its replicas run.
    Running,
    /// `Restarting`: a replica is being restarted.
    Restarting,
    /// `Suspended` (`runPolicy.suspend`).
    Suspended,
    /// `Succeeded`: it ended, its master replica exited 0.
    Succeeded,
    /// `Failed`: it ended otherwise (a replica failed, or `activeDeadlineSeconds` passed).
    Failed,
    /// A condition type this build does not know, as written.
    Other(String),
}

impl JobState {
    /// The state of a job whose `True` condition types are `true_ones`, oldest first. Pure.
    fn from_true_conditions<'a>(
        true_ones: impl DoubleEndedIterator<Item = &'a str> + Clone,
    ) -> Self {
        let ended = true_ones
            .clone()
            .find(|kind| matches!(*kind, "Succeeded" | "Failed"));
        match ended.or_else(|| true_ones.clone().next_back()) {
            None => Self::Pending,
            Some("Created") => Self::Created,
            Some("Running") => Self::Running,
            Some("Restarting") => Self::Restarting,
            Some("Suspended") => Self::Suspended,
            Some("Succeeded") => Self::Succeeded,
            Some("Failed") => Self::Failed,
            Some(other) => Self::Other(other.to_string()),
        }
    }

    /// Whether the job ended: `Succeeded` or `Failed`.
    pub fn ended(&self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Pending => "Pending",
            Self::Created => "Created",
            Self::Running => "Running",
            Self::Restarting => "Restarting",
            Self::Suspended => "Suspended",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Other(kind) => kind,
        })
    }
}

/// A PyTorchJob as `--resume-from` needs it, read from the object the API server holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviousPyTorchJob {
    /// The job name.
    pub name: String,
    /// Whether kfaws created it (label `app.kubernetes.io/managed-by: kfaws`).
    pub by_kfaws: bool,
    /// Where it stands ([`JobState`]).
    pub state: JobState,
    /// Its replicas, `Master` and `Worker` together: its world size.
    pub workers: u32,
    /// The hyperparameters its master replica was started with (its `--hp KEY=VALUE`
    /// arguments).
    pub hyperparameters: BTreeMap<String, String>,
    /// Its `TRAINER_DATA_DIR` inside the file system (less the mount point [`EFS_MOUNT`]),
    /// when it lies there.
    pub data_path: Option<String>,
    /// Its `TRAINER_CHECKPOINT_DIR` inside the file system, when it lies there.
    pub checkpoints: Option<String>,
    /// The CPU and memory its master replica requested (Kubernetes quantities), which a job
    /// continuing it keeps unless `--cpu` or `--memory` say otherwise.
    pub resources: (Option<String>, Option<String>),
}

impl PreviousPyTorchJob {
    /// Reads `job`, a `kubeflow.org/v1` PyTorchJob. Pure.
    pub fn from_object(job: &DynamicObject) -> Self {
        let by_kfaws = job
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/managed-by"))
            .map(String::as_str)
            == Some("kfaws");
        let replicas = job.data.pointer("/spec/pytorchReplicaSpecs");
        let workers = ["Master", "Worker"]
            .iter()
            .filter_map(|t| replicas?.get(*t)?.get("replicas")?.as_u64())
            .sum::<u64>();
        let container = replicas
            .and_then(|r| r.pointer("/Master/template/spec/containers"))
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("name").and_then(Value::as_str) == Some("pytorch"))
            });
        let env = |key: &str| -> Option<String> {
            container?
                .get("env")?
                .as_array()?
                .iter()
                .find(|e| e.get("name").and_then(Value::as_str) == Some(key))?
                .get("value")?
                .as_str()
                .map(str::to_string)
        };
        // Only a directory under the mount is on the file system the new job mounts.
        let on_efs = |path: String| {
            let rest = path.strip_prefix(EFS_MOUNT)?;
            rest.starts_with('/').then(|| rest.to_string())
        };
        let args: Vec<&str> = container
            .and_then(|c| c.get("args")?.as_array())
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let hyperparameters = args
            .windows(2)
            .filter(|w| w[0] == "--hp")
            .filter_map(|w| w[1].split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let request = |key: &str| {
            container?
                .pointer(&format!("/resources/requests/{key}"))?
                .as_str()
                .map(str::to_string)
        };
        let conditions = conditions(job);
        let state = JobState::from_true_conditions(
            conditions
                .iter()
                .filter(|c| c.1 == "True")
                .map(|c| c.0.as_str()),
        );
        Self {
            name: job.metadata.name.clone().unwrap_or_default(),
            by_kfaws,
            state,
            workers: u32::try_from(workers).unwrap_or(u32::MAX),
            hyperparameters,
            data_path: env("TRAINER_DATA_DIR").and_then(on_efs),
            checkpoints: env("TRAINER_CHECKPOINT_DIR").and_then(on_efs),
            resources: (request("cpu"), request("memory")),
        }
    }

    /// Whether it ended: `Succeeded` or `Failed`.
    pub fn ended(&self) -> bool {
        self.state.ended()
    }
}

/// What the new job `spec` runs with that `previous`, the job it continues, did not, as
/// `(name, was, now)`: the hyperparameters ([`resume::changed`]), then the CPU and memory its
/// replicas request (`cpu`, `memory`, as the flags and the manifest write them; `(none)` where
/// `previous` requested nothing). Pure.
pub fn changed(
    previous: &PreviousPyTorchJob,
    spec: &super::PyTorchJobSpec,
) -> Vec<(String, String, String)> {
    let mut out = resume::changed(&previous.hyperparameters, &spec.hyperparameters);
    let (cpu, memory) = &previous.resources;
    for (name, was, now) in [("cpu", cpu, &spec.cpu), ("memory", memory, &spec.memory)] {
        if was.as_deref() != Some(now.as_str()) {
            let was = was.clone().unwrap_or_else(|| "(none)".to_string());
            out.push((name.to_string(), was, now.clone()));
        }
    }
    out
}

/// PyTorchJob `name` in `namespace`; `None` when there is none.
///
/// # Errors
/// [`PyTorchJobError::Kube`] when it cannot be read.
pub async fn previous_job(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<PreviousPyTorchJob>, PyTorchJobError> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource());
    let job = api
        .get_opt(name)
        .await
        .map_err(kube_err(format!("reading PyTorchJob {namespace}/{name}")))?;
    Ok(job.as_ref().map(PreviousPyTorchJob::from_object))
}

/// The PyTorchJobs of `namespace` other than `except` that checkpoint into `checkpoints`: jobs
/// that continued, or continue, the same checkpoints, whatever their state.
///
/// # Errors
/// [`PyTorchJobError::Kube`] when they cannot be listed.
pub async fn jobs_sharing(
    client: &Client,
    namespace: &str,
    checkpoints: &str,
    except: &str,
) -> Result<Vec<PreviousPyTorchJob>, PyTorchJobError> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource());
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(kube_err(format!("listing the PyTorchJobs of {namespace}")))?;
    Ok(list
        .items
        .iter()
        .map(PreviousPyTorchJob::from_object)
        .filter(|job| job.name != except && job.checkpoints.as_deref() == Some(checkpoints))
        .collect())
}

/// Why the new job (`asked`, its hyperparameters) would train nothing because a job that
/// continued the same checkpoints (`sharing`, [`jobs_sharing`]) got further than `previous`:
/// the most epochs a `Succeeded` one completed, `N`, means the newest checkpoint there starts
/// epoch `N + 1` or later. `None` when `asked` has more epochs, or when [`problems`] already
/// says so of `previous` itself. Pure.
pub fn furthest_problem(
    previous: &PreviousPyTorchJob,
    asked: &BTreeMap<String, String>,
    sharing: &[PreviousPyTorchJob],
) -> Option<String> {
    let old = &previous.name;
    let asked = resume::epochs(asked);
    let own = match previous.state {
        JobState::Succeeded => resume::epochs(&previous.hyperparameters),
        _ => 0,
    };
    let (done, furthest) = sharing
        .iter()
        .filter(|job| job.state == JobState::Succeeded)
        .map(|job| (resume::epochs(&job.hyperparameters), &job.name))
        .max()?;
    (asked > own && asked <= done).then(|| {
        format!(
            "--resume-from {old}: PyTorchJob {furthest}, which continued the same checkpoints, \
             completed {done} epoch(s), so the newest checkpoint there starts epoch {} or later \
             (a job resumed from {old} continues from it, not from {old}'s own); --epochs {asked} \
             would train nothing: pass --epochs {} or more",
            done + 1,
            done + 1
        )
    })
}

/// The replica Pods of a job (`pods`) that may still write: not yet `Succeeded` or `Failed`,
/// or being deleted (a job that failed has its running replicas deleted, `cleanPodPolicy:
/// Running`, and rank 0 checkpoints on the SIGTERM that follows), as `(pod, what it is)`.
/// Pure.
pub fn live_replicas(pods: &[Pod]) -> Vec<(String, String)> {
    pods.iter()
        .filter_map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let phase = p
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "Pending".into());
            match (p.metadata.deletion_timestamp.is_some(), phase.as_str()) {
                (true, _) => Some((name, "terminating".to_string())),
                (false, "Succeeded" | "Failed") => None,
                (false, _) => Some((name, phase)),
            }
        })
        .collect()
}

/// [`live_replicas`] of PyTorchJob `job` (its Pods by the operator's label
/// `training.kubeflow.org/job-name`).
///
/// # Errors
/// [`PyTorchJobError::Kube`] when they cannot be listed.
pub async fn replicas_still_running(
    client: &Client,
    namespace: &str,
    job: &str,
) -> Result<Vec<(String, String)>, PyTorchJobError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods
        .list(&ListParams::default().labels(&format!("training.kubeflow.org/job-name={job}")))
        .await
        .map_err(kube_err(format!("listing the Pods of PyTorchJob {job}")))?;
    Ok(live_replicas(&list.items))
}

/// What a new job asks for, to be compared with the job it continues.
#[derive(Debug, Clone, Copy)]
pub struct Requested<'a> {
    /// The new job's name.
    pub name: &'a str,
    /// Its namespace (the user namespace), for the commands the problems suggest.
    pub namespace: &'a str,
    /// Its replicas.
    pub workers: u32,
    /// Its hyperparameters.
    pub hyperparameters: &'a BTreeMap<String, String>,
    /// Its data directory inside the file system (`--data efs:PATH`).
    pub data_path: &'a str,
}

/// Every reason `previous` cannot be continued by the job `requested` (empty when it can),
/// each naming the setting, `--resume-from` and what to do:
/// - the new job needs a name of its own (the old one still exists);
/// - kfaws must have created it, with its checkpoints on the file system;
/// - it must have ended (`Succeeded` or `Failed`): two jobs would write the same checkpoints;
/// - the world size, the data and the hyperparameters that fix each epoch's shards must be the
///   same ([`resume::shard_problems`]);
/// - after a job that `Succeeded`, whose newest checkpoint starts the epoch after its last,
///   `epochs` must be more than its own, or the new job would train nothing.
///
/// Pure.
pub fn problems(previous: &PreviousPyTorchJob, requested: &Requested<'_>) -> Vec<String> {
    let old = &previous.name;
    let ns = requested.namespace;
    let mut out = Vec::new();
    if old == requested.name {
        out.push(format!(
            "--resume-from {old}: the new job needs a name of its own (--job-name): PyTorchJob \
             {old} still exists"
        ));
    }
    if !previous.by_kfaws {
        out.push(format!(
            "--resume-from {old}: PyTorchJob {old} in {ns} was not created by kfaws (no label \
             app.kubernetes.io/managed-by: kfaws); only a job `kfaws train` created can be \
             resumed"
        ));
        return out;
    }
    if previous.checkpoints.is_none() {
        out.push(format!(
            "--resume-from {old}: PyTorchJob {old} has no TRAINER_CHECKPOINT_DIR under \
             {EFS_MOUNT}, so there is nothing on the file system to resume from"
        ));
    }
    if !previous.ended() {
        out.push(format!(
            "--resume-from {old}: PyTorchJob {old} is {}; two jobs would write the same \
             checkpoints: wait for it to end (`kubectl -n {ns} get pytorchjob {old}`; deleting \
             it stops it with a checkpoint, but kfaws can then no longer read the settings to \
             continue it with)",
            previous.state
        ));
    }
    if previous.workers != requested.workers {
        out.push(format!(
            "--resume-from {old}: it ran {} replica(s), --workers is {}: the checkpoint's \
             position in the data holds only for the same world size (pass --workers {})",
            previous.workers, requested.workers, previous.workers
        ));
    }
    let trim = |p: &str| p.trim_end_matches('/').to_string();
    match &previous.data_path {
        Some(was) if trim(was) != trim(requested.data_path) => out.push(format!(
            "--resume-from {old}: it read efs:{was}, --data is efs:{}: a resumed job reads the \
             same data",
            requested.data_path
        )),
        Some(_) => {}
        None => out.push(format!(
            "--resume-from {old}: its TRAINER_DATA_DIR is not under {EFS_MOUNT}, so kfaws cannot \
             tell whether --data is the same data"
        )),
    }
    out.extend(resume::shard_problems(
        old,
        &previous.hyperparameters,
        requested.hyperparameters,
    ));
    let (done, asked) = (
        resume::epochs(&previous.hyperparameters),
        resume::epochs(requested.hyperparameters),
    );
    if previous.state == JobState::Succeeded && asked <= done {
        out.push(format!(
            "--resume-from {old}: it completed its {done} epoch(s), so its newest checkpoint \
             starts epoch {}; --epochs {asked} would train nothing: pass --epochs {} or more",
            done + 1,
            done + 1
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::super::PyTorchJobSpec;
    use super::*;

    fn spec(workers: u32) -> PyTorchJobSpec {
        let hyperparameters = [("epochs", "2"), ("batch-size", "32"), ("lr", "0.02")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        PyTorchJobSpec {
            name: "fmnist-1".into(),
            namespace: "team".into(),
            image: "repo@sha256:00".into(),
            workers,
            hyperparameters,
            data_path: "/datasets/fmnist".into(),
            cpu: "1".into(),
            memory: "2Gi".into(),
            gpu: false,
            checkpoints: "/checkpoints/fmnist-1/20261204T190512Z-1a2b3c4d".into(),
            require_checkpoint: false,
            max_runtime: Duration::from_secs(60),
        }
    }

    /// The job as the API server holds it once the operator set `conditions` (`(type,
    /// status)`), as JSON.
    fn object(spec: &PyTorchJobSpec, conditions: &[(&str, &str)]) -> Value {
        let mut job = spec.manifest();
        job["status"] = json!({
            "conditions": conditions
                .iter()
                .map(|(t, s)| json!({"type": t, "status": s, "reason": "", "message": ""}))
                .collect::<Vec<_>>(),
        });
        job
    }

    fn read(job: Value) -> PreviousPyTorchJob {
        PreviousPyTorchJob::from_object(&serde_json::from_value(job).unwrap())
    }

    fn previous(workers: u32, conditions: &[(&str, &str)]) -> PreviousPyTorchJob {
        read(object(&spec(workers), conditions))
    }

    fn requested<'a>(hp: &'a BTreeMap<String, String>, workers: u32) -> Requested<'a> {
        Requested {
            name: "fmnist-2",
            namespace: "team",
            workers,
            hyperparameters: hp,
            data_path: "/datasets/fmnist/",
        }
    }

    #[test]
    fn the_manifest_kfaws_submits_reads_back_with_its_settings() {
        let job = previous(
            3,
            &[
                ("Created", "True"),
                ("Running", "False"),
                ("Failed", "True"),
            ],
        );
        assert_eq!(
            job,
            PreviousPyTorchJob {
                name: "fmnist-1".into(),
                by_kfaws: true,
                state: JobState::Failed,
                workers: 3,
                hyperparameters: spec(3).hyperparameters,
                data_path: Some("/datasets/fmnist".into()),
                checkpoints: Some("/checkpoints/fmnist-1/20261204T190512Z-1a2b3c4d".into()),
                resources: (Some("1".into()), Some("2Gi".into())),
            }
        );
        assert!(job.ended());
        assert_eq!(previous(1, &[]).state, JobState::Pending);
        assert_eq!(previous(1, &[]).workers, 1);
        let running = previous(2, &[("Created", "True"), ("Running", "True")]);
        assert_eq!(running.state, JobState::Running);
        assert!(!running.ended());
        // A job restarted after it ran is Restarting; an ended one stays ended whatever came after.
        let restarting = previous(2, &[("Running", "True"), ("Restarting", "True")]);
        assert_eq!(restarting.state.to_string(), "Restarting");
        let failed = previous(2, &[("Failed", "True"), ("Running", "True")]);
        assert_eq!(failed.state, JobState::Failed);
        let unknown = previous(2, &[("Created", "True"), ("Queued", "True")]);
        assert_eq!(unknown.state, JobState::Other("Queued".into()));
        assert_eq!(unknown.state.to_string(), "Queued");
        assert!(!unknown.ended());
    }

    #[test]
    fn what_changed_lists_hyperparameters_then_resources() {
        let old = previous(2, &[("Failed", "True")]);
        let mut new = spec(2);
        assert_eq!(changed(&old, &new), Vec::new(), "the same settings");
        new.hyperparameters.insert("epochs".into(), "4".into());
        new.memory = "3Gi".into();
        let t = |k: &str, was: &str, now: &str| (k.to_string(), was.to_string(), now.to_string());
        assert_eq!(
            changed(&old, &new),
            vec![t("epochs", "2", "4"), t("memory", "2Gi", "3Gi")]
        );
        let unrequested = PreviousPyTorchJob {
            resources: (None, Some("2Gi".into())),
            ..old
        };
        assert_eq!(
            changed(&unrequested, &spec(2)),
            vec![t("cpu", "(none)", "1")]
        );
    }

    #[test]
    fn an_ended_job_resumes_with_more_epochs() {
        let mut hp = spec(2).hyperparameters;
        hp.insert("epochs".into(), "4".into());
        hp.insert("lr".into(), "0.01".into());
        for state in ["Succeeded", "Failed"] {
            let p = previous(2, &[("Created", "True"), (state, "True")]);
            assert_eq!(
                problems(&p, &requested(&hp, 2)),
                Vec::<String>::new(),
                "{state}"
            );
        }
    }

    #[test]
    fn every_reason_a_job_cannot_be_continued_is_told() {
        let p = previous(2, &[("Created", "True"), ("Running", "True")]);
        let mut hp = spec(2).hyperparameters;
        hp.insert("batch-size".into(), "64".into());
        let asked = Requested {
            name: "fmnist-1",
            data_path: "/datasets/other",
            ..requested(&hp, 3)
        };
        let all = problems(&p, &asked);
        let expected = [
            "the new job needs a name of its own (--job-name): PyTorchJob fmnist-1 still exists",
            "PyTorchJob fmnist-1 is Running; two jobs would write the same checkpoints",
            "wait for it to end (`kubectl -n team get pytorchjob fmnist-1`",
            "it ran 2 replica(s), --workers is 3",
            "(pass --workers 2)",
            "it read efs:/datasets/fmnist, --data is efs:/datasets/other",
            "it ran with batch-size 32, this job asks for 64",
        ];
        for e in expected {
            assert!(all.iter().any(|p| p.contains(e)), "{e}: {all:#?}");
        }
        assert_eq!(all.len(), 5, "{all:#?}");
        assert!(all
            .iter()
            .all(|p| p.starts_with("--resume-from fmnist-1: ")));
    }

    #[test]
    fn after_a_job_that_succeeded_only_more_epochs_train() {
        let p = previous(2, &[("Succeeded", "True")]);
        let hp = spec(2).hyperparameters;
        let all = problems(&p, &requested(&hp, 2));
        assert_eq!(
            all,
            vec![
                "--resume-from fmnist-1: it completed its 2 epoch(s), so its newest checkpoint \
                 starts epoch 3; --epochs 2 would train nothing: pass --epochs 3 or more"
            ]
        );
        // A job that failed may have stopped in any epoch: kfaws cannot see its checkpoints.
        let failed = previous(2, &[("Failed", "True")]);
        assert!(problems(&failed, &requested(&hp, 2)).is_empty());
    }

    #[test]
    fn a_job_that_continued_the_same_checkpoints_further_sets_the_epochs_to_pass() {
        let old = previous(2, &[("Succeeded", "True")]);
        let mut later = spec(2);
        later.name = "fmnist-3".into();
        later.hyperparameters.insert("epochs".into(), "6".into());
        let later = read(object(&later, &[("Succeeded", "True")]));
        let mut hp = spec(2).hyperparameters;
        hp.insert("epochs".into(), "5".into());
        assert_eq!(
            furthest_problem(&old, &hp, std::slice::from_ref(&later)).as_deref(),
            Some(
                "--resume-from fmnist-1: PyTorchJob fmnist-3, which continued the same \
                 checkpoints, completed 6 epoch(s), so the newest checkpoint there starts epoch 7 \
                 or later (a job resumed from fmnist-1 continues from it, not from fmnist-1's \
                 own); --epochs 5 would train nothing: pass --epochs 7 or more"
            )
        );
        hp.insert("epochs".into(), "7".into());
        assert_eq!(
            furthest_problem(&old, &hp, std::slice::from_ref(&later)),
            None
        );
        // Told of the job itself by `problems`, once.
        hp.insert("epochs".into(), "2".into());
        assert_eq!(
            furthest_problem(&old, &hp, std::slice::from_ref(&later)),
            None
        );
        // A job that failed may have stopped anywhere: only one that succeeded counts.
        let failed = PreviousPyTorchJob {
            state: JobState::Failed,
            ..later
        };
        hp.insert("epochs".into(), "5".into());
        assert_eq!(furthest_problem(&old, &hp, &[failed]), None);
    }

    #[test]
    fn replicas_not_yet_ended_or_being_deleted_may_still_write() {
        let pod = |name: &str, phase: Option<&str>, deleting: bool| -> Pod {
            serde_json::from_value(json!({
                "metadata": {
                    "name": name,
                    "deletionTimestamp": deleting.then_some("2026-12-07T20:00:00Z"),
                },
                "status": phase.map(|p| json!({"phase": p})),
            }))
            .unwrap()
        };
        let pods = [
            pod("j-master-0", Some("Failed"), false),
            pod("j-worker-0", Some("Running"), true),
            pod("j-worker-1", Some("Succeeded"), false),
            pod("j-worker-2", None, false),
            pod("j-worker-3", Some("Running"), false),
        ];
        assert_eq!(
            live_replicas(&pods),
            vec![
                ("j-worker-0".to_string(), "terminating".to_string()),
                ("j-worker-2".to_string(), "Pending".to_string()),
                ("j-worker-3".to_string(), "Running".to_string()),
            ]
        );
        assert!(live_replicas(&pods[..1]).is_empty());
    }

    #[test]
    fn a_job_kfaws_did_not_create_or_without_checkpoints_on_efs_is_refused() {
        let mut job = object(&spec(1), &[("Failed", "True")]);
        job["metadata"]["labels"] = json!({});
        let p = read(job);
        let hp = spec(1).hyperparameters;
        let all = problems(&p, &requested(&hp, 1));
        assert_eq!(all.len(), 1, "{all:#?}");
        assert!(all[0].contains("was not created by kfaws"), "{all:#?}");

        let mut job = object(&spec(1), &[("Failed", "True")]);
        let env = &mut job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
            ["containers"][0]["env"];
        for e in env.as_array_mut().unwrap() {
            if e["name"] == "TRAINER_CHECKPOINT_DIR" {
                e["value"] = json!("/tmp/checkpoints");
            }
        }
        let p = read(job);
        assert_eq!(p.checkpoints, None);
        let all = problems(&p, &requested(&hp, 1));
        assert!(
            all.len() == 1 && all[0].contains("has no TRAINER_CHECKPOINT_DIR under /mnt/efs"),
            "{all:#?}"
        );
    }
}
