//! `kfaws train --runtime kubernetes`: a Kubeflow `PyTorchJob`
//! (`kubeflow.org/v1`) in the deployment's user namespace, following the
//! training operator's contract
//! (<https://www.kubeflow.org/docs/components/trainer/legacy-v1/user-guides/pytorch/>):
//! one `Master` and `N − 1` `Worker` replicas whose container is named
//! `pytorch`, restart policy `ExitCode` (exit codes 1–127 are permanent
//! failures, 128 and above are retried, which is how the trainer's exit
//! codes are chosen), Istio sidecar injection off (a sidecar never exits,
//! so the job would never complete), and the EFS claim mounted for the data,
//! the model and the checkpoints.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, LogParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::Client;
use serde_json::{json, Value};

use crate::k8s::discovery::{provider, Served};

pub mod resume;

/// Where the EFS claim is mounted in every replica.
pub const EFS_MOUNT: &str = "/mnt/efs";
/// The claim the user namespace holds (`manifests/user-namespace.yaml`).
pub const EFS_CLAIM: &str = "efs-claim";
/// The operator's default rendezvous port (`pytorchjob-port`).
pub const MASTER_PORT: i32 = 23456;

/// A PyTorchJob to submit.
#[derive(Debug, Clone)]
pub struct PyTorchJobSpec {
    /// The job name (a valid [`crate::train::name::JobName`]).
    pub name: String,
    /// The user namespace.
    pub namespace: String,
    /// The trainer image (`repo@sha256:…`).
    pub image: String,
    /// Total replicas: one master and `workers − 1` workers.
    pub workers: u32,
    /// Hyperparameters (`--hp KEY=VALUE` arguments).
    pub hyperparameters: BTreeMap<String, String>,
    /// The dataset's path inside the file system (`/datasets/fashion-mnist`).
    pub data_path: String,
    /// CPU request and limit per replica (Kubernetes quantity, e.g. `1`).
    pub cpu: String,
    /// Memory request and limit per replica (e.g. `2Gi`).
    pub memory: String,
    /// One NVIDIA GPU per replica, for `backend=nccl` (the trainer uses CUDA device 0): the
    /// NVIDIA device plugin's extended resource `nvidia.com/gpu: 1` in the limits, which
    /// Kubernetes also takes as the request (Kubernetes docs, "Schedule GPUs").
    pub gpu: bool,
    /// Where rank 0 checkpoints, inside the file system: for a new job
    /// `/checkpoints/<name>/<run>` ([`new_checkpoint_path`]), one directory per submission, so
    /// the job's own restarts (`restartPolicy: ExitCode`) resume them while a later job of the
    /// same name, submitted after this one was deleted, starts afresh instead of resuming this
    /// one's epochs under other settings; for a job that continues another's (`--resume-from`,
    /// [`resume`]), that job's.
    pub checkpoints: String,
    /// Whether the trainer must find a checkpoint to resume from in [`Self::checkpoints`]
    /// (`TRAINER_REQUIRE_CHECKPOINT`: exit 1 before the first step otherwise), as a job that
    /// continues another's must.
    pub require_checkpoint: bool,
    /// `--max-runtime`: the job's `runPolicy.activeDeadlineSeconds` (whole seconds, at least
    /// 1), after which the operator fails the job (reason `DeadlineExceeded`) and deletes its
    /// running Pods, whether or not kfaws still waits. It is what bounds a replica that keeps
    /// exiting with a retryable code (128 and above, e.g. OOMKilled's 137): with `restartPolicy:
    /// ExitCode` the operator recreates such a Pod without counting it against `backoffLimit`
    /// (kubeflow/trainer#2045).
    pub max_runtime: Duration,
}

/// The job's `runPolicy.backoffLimit`: how many times the operator may restart its replicas
/// before the job fails. [`wait`] enforces it too, for the restarts the operator does not
/// count ([`PyTorchJobError::TooManyRestarts`]).
pub const BACKOFF_LIMIT: u32 = 3;

/// Seconds the kubelet waits between a replica's SIGTERM and its SIGKILL (the Pod's
/// `terminationGracePeriodSeconds`): the trainer's stop grace (`TRAINER_STOP_GRACE`,
/// [`kfaws_trainer_contract::STOP_GRACE_SECS`] by default, `trainer/README.md`), after which its stop watchdog makes it exit 143 however far
/// it got, plus a 15 s margin, so that the trainer ends itself (its checkpoint written or
/// given up) before the kubelet's SIGKILL. The kubelet's own default, 30 s, would race the
/// watchdog.
pub const TERMINATION_GRACE_SECS: u64 = kfaws_trainer_contract::STOP_GRACE_SECS + 15;

/// A new submission id: the UTC time to the second and 8 random hex digits
/// (`20261204T190512Z-1a2b3c4d`), sortable by time.
pub fn run_id() -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!(
        "{}-{}",
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ"),
        &random[..8]
    )
}

/// The checkpoint directory of a new job `name`, inside the file system:
/// `/checkpoints/<name>/<run>` with a new [`run_id`].
pub fn new_checkpoint_path(name: &str) -> String {
    format!("/checkpoints/{name}/{}", run_id())
}

impl PyTorchJobSpec {
    /// Where rank 0 writes the model, inside the file system.
    pub fn model_path(&self) -> String {
        format!("/models/{}", self.name)
    }

    /// The `PyTorchJob` object.
    pub fn manifest(&self) -> Value {
        let mut args = vec!["train".to_string()];
        for (k, v) in &self.hyperparameters {
            args.push("--hp".into());
            args.push(format!("{k}={v}"));
        }
        let mut env = vec![
            json!({"name": "TRAINER_DATA_DIR", "value": format!("{EFS_MOUNT}{}", self.data_path)}),
            json!({"name": "TRAINER_MODEL_DIR", "value": format!("{EFS_MOUNT}{}", self.model_path())}),
            json!({"name": "TRAINER_CHECKPOINT_DIR", "value": format!("{EFS_MOUNT}{}", self.checkpoints)}),
        ];
        if self.require_checkpoint {
            env.push(json!({"name": "TRAINER_REQUIRE_CHECKPOINT", "value": "true"}));
        }
        let mut limits = json!({"cpu": self.cpu, "memory": self.memory});
        if self.gpu {
            limits["nvidia.com/gpu"] = json!(1);
        }
        // Istio reads `sidecar.istio.io/inject` from a pod's labels (which
        // its documentation recommends, "Installing the Sidecar": controlling
        // the injection policy) and, deprecated, from its annotations: both,
        // so that any Istio release leaves the ranks without a sidecar.
        let template = json!({
            "metadata": {
                "labels": {
                    "app.kubernetes.io/managed-by": "kfaws",
                    "sidecar.istio.io/inject": "false",
                },
                "annotations": {"sidecar.istio.io/inject": "false"},
            },
            "spec": {
                "terminationGracePeriodSeconds": TERMINATION_GRACE_SECS,
                // The trainer never calls the Kubernetes API: no token in its pods.
                "automountServiceAccountToken": false,
                // The container runtime's default seccomp profile (Pod Security Standards,
                // "restricted"; unconfined otherwise on most clusters).
                "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "pytorch",
                    "image": self.image,
                    "command": ["kfaws-trainer"],
                    "args": args,
                    "env": env,
                    "ports": [{"name": "pytorchjob-port", "containerPort": MASTER_PORT}],
                    "resources": {
                        "requests": {"cpu": self.cpu, "memory": self.memory},
                        "limits": limits,
                    },
                    // The kubelet puts the log's tail in the termination message
                    // when the container fails without writing one: the reason
                    // `kfaws train` reports.
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "securityContext": {
                        "allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [{"name": "efs", "mountPath": EFS_MOUNT}],
                }],
                "volumes": [{"name": "efs", "persistentVolumeClaim": {"claimName": EFS_CLAIM}}],
            },
        });
        let mut replicas = serde_json::Map::new();
        replicas.insert(
            "Master".into(),
            json!({"replicas": 1, "restartPolicy": "ExitCode", "template": template}),
        );
        if self.workers > 1 {
            replicas.insert(
                "Worker".into(),
                json!({"replicas": self.workers - 1, "restartPolicy": "ExitCode", "template": template}),
            );
        }
        json!({
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "kfaws"},
                // On the job as well as on its pod templates (case C17): Istio's
                // injector reads the pods', tools and policies read the job's.
                "annotations": {"sidecar.istio.io/inject": "false"},
            },
            "spec": {
                "runPolicy": {
                    "backoffLimit": BACKOFF_LIMIT,
                    // The operator stops the job at kfaws' deadline even when kfaws is gone.
                    "activeDeadlineSeconds": self.max_runtime.as_secs().max(1),
                    // Once the job ended, replicas still running or pending are deleted (a
                    // failed job's peers would otherwise run on, holding their nodes); those
                    // that terminated stay, with their logs, for the failure report.
                    "cleanPodPolicy": "Running",
                },
                "pytorchReplicaSpecs": replicas,
            },
        })
    }
}

/// A PyTorchJob that could not be submitted or watched.
#[derive(Debug, thiserror::Error)]
pub enum PyTorchJobError {
    /// The cluster does not serve `kubeflow.org/v1` `PyTorchJob`.
    #[error("the cluster does not serve kubeflow.org/v1 PyTorchJob: install {0}")]
    NotServed(&'static str),
    /// The user namespace does not exist.
    #[error(
        "namespace {0:?} does not exist; run `kfaws apply` (it is created by k8s.user-namespace)"
    )]
    NoNamespace(String),
    /// A job of that name exists in the namespace.
    #[error("PyTorchJob {name} already exists in namespace {namespace}; pass another --job-name (or delete it: kubectl -n {namespace} delete pytorchjob {name})")]
    AlreadyExists {
        /// The job.
        name: String,
        /// The namespace.
        namespace: String,
    },
    /// The job was deleted while kfaws waited for it.
    #[error(
        "PyTorchJob {name} was deleted from namespace {namespace} while kfaws waited for it \
         (outside kfaws, e.g. `kubectl delete`); its pods went with it, its checkpoints and \
         any model stay on the file system"
    )]
    Deleted {
        /// The job.
        name: String,
        /// The namespace.
        namespace: String,
    },
    /// A Kubernetes call failed.
    #[error("{what}: {}", message(error))]
    Kube {
        /// The call.
        what: String,
        /// The cause, told in the message (not as a `source`: the API
        /// server's `Status` would follow it in the error chain again, as
        /// a debug dump).
        error: kube::Error,
    },
    /// The job's replicas were restarted more than [`BACKOFF_LIMIT`] times, which the operator
    /// does not stop when they exit with a retryable code; the job is left on the cluster.
    #[error(
        "PyTorchJob {name} restarted its replicas {restarts} times, more than its backoffLimit \
         of {limit} (the training operator recreates a replica that exits 128 or above, e.g. \
         OOMKilled, without counting it: kubeflow/trainer#2045); last conditions: \
         {conditions}. The job is still on the cluster; delete it with: kubectl -n {namespace} \
         delete pytorchjob {name}"
    )]
    TooManyRestarts {
        /// The job.
        name: String,
        /// Its namespace.
        namespace: String,
        /// The restarts seen ([`Restarts`]).
        restarts: u32,
        /// [`BACKOFF_LIMIT`].
        limit: u32,
        /// Its last conditions.
        conditions: String,
    },
    /// The job did not finish in time; it is left on the cluster (its `activeDeadlineSeconds`,
    /// [`PyTorchJobSpec::max_runtime`], has the operator stop it).
    #[error(
        "PyTorchJob {name} did not finish within {timeout:?}; last conditions: {conditions}. \
         The job is still on the cluster; delete it with: kubectl -n {namespace} delete \
         pytorchjob {name}"
    )]
    Timeout {
        /// The job.
        name: String,
        /// Its namespace.
        namespace: String,
        /// The limit.
        timeout: Duration,
        /// Its last conditions.
        conditions: String,
    },
}

/// The API server's message for a refused call (its `Status`), else the
/// error itself; kube's own rendering repeats the whole `Status`. A 401 says
/// whom an EKS cluster admits ([`crate::k8s::retry::message`]): those who
/// train are often not who made the cluster.
fn message(e: &kube::Error) -> String {
    crate::k8s::retry::message(e)
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> PyTorchJobError {
    let what = what.into();
    move |error| PyTorchJobError::Kube { what, error }
}

fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubeflow.org", "v1", "PyTorchJob"),
        "pytorchjobs",
    )
}

/// Checks that the cluster can run the job: the PyTorchJob kind is served
/// (the training operator's CRD is Established) and the namespace exists.
///
/// # Errors
/// [`PyTorchJobError::NotServed`] (naming the component to install),
/// [`PyTorchJobError::NoNamespace`], or the failed call.
pub async fn preflight(client: &Client, namespace: &str) -> Result<(), PyTorchJobError> {
    let served = Served::fetch(client)
        .await
        .map_err(kube_err("API discovery"))?;
    if served.get("kubeflow.org", "v1", "PyTorchJob").is_none() {
        return Err(PyTorchJobError::NotServed(
            provider("kubeflow.org", "PyTorchJob").unwrap_or("the Kubeflow training operator"),
        ));
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    if namespaces
        .get_opt(namespace)
        .await
        .map_err(kube_err(format!("reading namespace {namespace}")))?
        .is_none()
    {
        return Err(PyTorchJobError::NoNamespace(namespace.to_string()));
    }
    Ok(())
}

/// Creates the job.
///
/// # Errors
/// The failed call (an existing job of that name is a 409 Conflict).
pub async fn submit(client: &Client, spec: &PyTorchJobSpec) -> Result<(), PyTorchJobError> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &spec.namespace, &resource());
    let obj: DynamicObject =
        serde_json::from_value(spec.manifest()).expect("manifest is an object");
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {
            return Err(PyTorchJobError::AlreadyExists {
                name: spec.name.clone(),
                namespace: spec.namespace.clone(),
            })
        }
        Err(e) => return Err(kube_err(format!("creating PyTorchJob {}", spec.name))(e)),
    }
    Ok(())
}

/// A replica that failed: its Pod, exit code, reason and the tail of its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaFailure {
    /// The Pod (`<job>-worker-0`).
    pub pod: String,
    /// The container's exit code.
    pub exit_code: Option<i32>,
    /// The container's reason (`Error`, `OOMKilled`).
    pub reason: String,
    /// The termination message or the log's tail.
    pub message: String,
}

/// How a job ended.
#[derive(Debug, Clone)]
pub struct JobOutcome {
    /// `Succeeded` or `Failed`.
    pub succeeded: bool,
    /// The final condition's message.
    pub message: String,
    /// The first failed replica, for a failed job.
    pub failed_replica: Option<ReplicaFailure>,
}

/// The job's conditions, as `(type, status, reason, message)`.
fn conditions(job: &DynamicObject) -> Vec<(String, String, String, String)> {
    let s = |c: &Value, k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    job.data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    (
                        s(c, "type"),
                        s(c, "status"),
                        s(c, "reason"),
                        s(c, "message"),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `(type, status, reason)` of each condition, as errors tell them.
fn describe(conditions: &[(String, String, String, String)]) -> String {
    conditions
        .iter()
        .map(|c| format!("{}={} ({})", c.0, c.1, c.2))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Counts a job's restarts as its updates arrive: each time its
/// `Restarting` condition turns `True` (the operator sets it when it
/// recreates or restarts a replica, and replaces it with `Running` once the
/// replicas run again). Restarts between two updates are counted once, so the
/// count never exceeds the operator's.
#[derive(Debug, Default)]
struct Restarts {
    restarting: bool,
    count: u32,
}

impl Restarts {
    /// Takes the job's current conditions; returns the restarts so far.
    fn observe(&mut self, conditions: &[(String, String, String, String)]) -> u32 {
        let now = conditions
            .iter()
            .any(|c| c.0 == "Restarting" && c.1 == "True");
        if now && !self.restarting {
            self.count += 1;
        }
        self.restarting = now;
        self.count
    }
}

/// Watches the job until its `Succeeded` or `Failed` condition is `True`,
/// calling `on_event` with each condition as it turns `True` (`Created`,
/// `Running`, …), in the order the job's updates arrive. A watch sees every
/// update, so a `Running` that is `True` only between two of them is not
/// missed, as a poll could miss it. A watch that breaks is re-established
/// with kube's default backoff (its error logged).
///
/// # Errors
/// [`PyTorchJobError::Timeout`] after `timeout` with the last conditions;
/// [`PyTorchJobError::TooManyRestarts`] once its replicas were restarted more
/// than [`BACKOFF_LIMIT`] times ([`Restarts`]);
/// [`PyTorchJobError::Deleted`] when the job is or becomes absent;
/// [`PyTorchJobError::Kube`] when the job's outcome cannot be read.
pub async fn wait(
    client: &Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
    mut on_event: impl FnMut(&str),
) -> Result<JobOutcome, PyTorchJobError> {
    use futures::TryStreamExt as _;
    use kube::runtime::{watcher, WatchStreamExt as _};

    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource());
    let deadline = tokio::time::Instant::now() + timeout;
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher(api, config).default_backoff());
    let deleted = || PyTorchJobError::Deleted {
        name: name.to_string(),
        namespace: namespace.to_string(),
    };
    let mut seen = Vec::new();
    let mut last = Vec::new();
    let mut restarts = Restarts::default();
    // Whether the current (re)list has shown the job.
    let mut listed = false;
    loop {
        let event = match tokio::time::timeout_at(deadline, events.try_next()).await {
            Err(_) => {
                return Err(PyTorchJobError::Timeout {
                    name: name.to_string(),
                    namespace: namespace.to_string(),
                    timeout,
                    conditions: describe(&last),
                })
            }
            Ok(Ok(Some(event))) => event,
            Ok(Ok(None)) => return Err(deleted()),
            // Refused (no permission to watch, the kind no longer served): no retry helps.
            Ok(Err(
                watcher::Error::InitialListFailed(e @ kube::Error::Api(_))
                | watcher::Error::WatchStartFailed(e @ kube::Error::Api(_)),
            )) if matches!(&e, kube::Error::Api(s) if matches!(s.code, 401 | 403 | 404)) => {
                return Err(kube_err(format!("watching PyTorchJob {name}"))(e));
            }
            Ok(Err(e)) => {
                tracing::warn!(job = name, error = %e, "watching the PyTorchJob failed; watching again");
                continue;
            }
        };
        let job = match event {
            watcher::Event::Init => {
                listed = false;
                continue;
            }
            watcher::Event::InitDone if !listed => return Err(deleted()),
            watcher::Event::InitDone => continue,
            watcher::Event::Delete(_) => return Err(deleted()),
            watcher::Event::Apply(job) | watcher::Event::InitApply(job) => {
                listed = true;
                job
            }
        };
        let conds = conditions(&job);
        for c in &conds {
            if c.1 == "True" && !seen.contains(c) {
                on_event(&format!("{}: {}", c.0, c.3));
                seen.push(c.clone());
            }
        }
        let done = conds
            .iter()
            .find(|c| c.1 == "True" && (c.0 == "Succeeded" || c.0 == "Failed"));
        if let Some((kind, _, _, message)) = done {
            let succeeded = kind == "Succeeded";
            let failed_replica = if succeeded {
                None
            } else {
                failed_replica(client, namespace, name).await
            };
            return Ok(JobOutcome {
                succeeded,
                message: message.clone(),
                failed_replica,
            });
        }
        let restarted = restarts.observe(&conds);
        if restarted > BACKOFF_LIMIT {
            return Err(PyTorchJobError::TooManyRestarts {
                name: name.to_string(),
                namespace: namespace.to_string(),
                restarts: restarted,
                limit: BACKOFF_LIMIT,
                conditions: describe(&conds),
            });
        }
        last = conds;
    }
}

/// The replica whose `pytorch` container failed first (the earliest
/// `finishedAt` of a non-zero termination, [`first_failure`]), with the
/// termination message, or the log's last 20 lines when there is none and
/// the kubelet serves logs. `None` when no Pod says why.
pub async fn failed_replica(client: &Client, namespace: &str, job: &str) -> Option<ReplicaFailure> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods
        .list(&ListParams::default().labels(&format!("training.kubeflow.org/job-name={job}")))
        .await
        .ok()?;
    let mut first = first_failure(&list.items)?;
    if first.message.trim().is_empty() {
        let params = LogParams {
            container: Some("pytorch".into()),
            tail_lines: Some(20),
            ..LogParams::default()
        };
        if let Ok(log) = pods.logs(&first.pod, &params).await {
            first.message = log;
        }
    }
    Some(first)
}

/// Of `pods`, the one whose `pytorch` container failed first: its current
/// state's termination, else its last state's (a container restarted in
/// place), when the exit code is not 0; the earliest `finishedAt` wins (the
/// replica whose failure made its peers fail), ties and missing times going
/// by Pod name.
fn first_failure(pods: &[Pod]) -> Option<ReplicaFailure> {
    use k8s_openapi::api::core::v1::ContainerStateTerminated;
    let mut failures: Vec<(&ContainerStateTerminated, String)> = pods
        .iter()
        .filter_map(|p| {
            let status = p.status.as_ref()?.container_statuses.as_ref()?;
            let c = status.iter().find(|c| c.name == "pytorch")?;
            let t = c
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .or_else(|| c.last_state.as_ref()?.terminated.as_ref())?;
            (t.exit_code != 0).then(|| (t, p.metadata.name.clone().unwrap_or_default()))
        })
        .collect();
    // A termination without a time sorts after every one with a time.
    let key = |(t, pod): &(&ContainerStateTerminated, String)| {
        let at = t.finished_at.as_ref().map(|f| f.0);
        (at.is_none(), at, pod.clone())
    };
    failures.sort_by_key(key);
    let (t, pod) = failures.into_iter().next()?;
    Some(ReplicaFailure {
        pod,
        exit_code: Some(t.exit_code),
        reason: t.reason.clone().unwrap_or_default(),
        message: t.message.clone().unwrap_or_default(),
    })
}

/// Lines of the master replica's log read for [`final_metrics`]: the
/// trainer prints its last metric line a few lines before it exits.
const FINAL_LOG_LINES: i64 = 200;

/// The last metric line ([`super::is_metrics_line`]) in the master
/// replica's log (`<job>-master-0`, container `pytorch`, its last
/// `FINAL_LOG_LINES` lines): the job's final metrics, read as SageMaker's
/// metric definitions read them ([`super::FinalMetrics::from_line`]).
/// `None` when the log cannot be read (no kubelet serves it, the Pod is
/// gone) or holds none.
pub async fn final_metrics(
    client: &Client,
    namespace: &str,
    job: &str,
) -> Option<super::FinalMetrics> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = LogParams {
        container: Some("pytorch".into()),
        tail_lines: Some(FINAL_LOG_LINES),
        ..LogParams::default()
    };
    let log = pods.logs(&format!("{job}-master-0"), &params).await.ok()?;
    log.lines()
        .rev()
        .find(|l| super::is_metrics_line(l))
        .map(super::FinalMetrics::from_line)
}

/// Streams the master replica's log (`<job>-master-0`, container
/// `pytorch`) to `print` line by line, as `kubectl logs -f` does, once the
/// Pod has started; returns when the log ends. The log comes from the
/// kubelet through the API server, so it fails where no kubelet serves it.
///
/// # Errors
/// The failed call.
pub async fn follow_master_log(
    client: &Client,
    namespace: &str,
    job: &str,
    mut print: impl FnMut(&str),
) -> Result<(), PyTorchJobError> {
    use futures::{AsyncBufReadExt as _, TryStreamExt as _};
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = format!("{job}-master-0");
    // Logs exist once the container started.
    loop {
        let started = pods
            .get_opt(&pod)
            .await
            .map_err(kube_err(format!("reading Pod {pod}")))?
            .and_then(|p| p.status)
            .and_then(|s| s.phase)
            .is_some_and(|phase| phase != "Pending");
        if started {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let params = LogParams {
        container: Some("pytorch".into()),
        follow: true,
        ..LogParams::default()
    };
    let mut lines = pods
        .log_stream(&pod, &params)
        .await
        .map_err(kube_err(format!("reading the log of Pod {pod}")))?
        .lines();
    while let Some(line) = lines.try_next().await.map_err(|e| {
        kube_err(format!("reading the log of Pod {pod}"))(kube::Error::ReadEvents(e))
    })? {
        print(&line);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_401_says_whom_an_eks_cluster_admits() {
        let status = kube::core::Status::failure("Unauthorized", "Unauthorized").with_code(401);
        let err = kube_err("API discovery")(kube::Error::Api(Box::new(status))).to_string();
        assert!(
            err.starts_with(
                "API discovery: Unauthorized (401 Unauthorized); the cluster does not \
                             admit these credentials"
            ) && err.contains("[access_entries]"),
            "{err}"
        );
    }

    fn spec(workers: u32) -> PyTorchJobSpec {
        PyTorchJobSpec {
            name: "kfaws-train-1".into(),
            namespace: "team".into(),
            image: "1.dkr.ecr.us-east-1.amazonaws.com/kfaws-trainer@sha256:ab".into(),
            workers,
            hyperparameters: BTreeMap::from([("epochs".into(), "2".into())]),
            data_path: "/datasets/fmnist".into(),
            cpu: "1".into(),
            memory: "2Gi".into(),
            gpu: false,
            checkpoints: "/checkpoints/kfaws-train-1/20261204T190512Z-1a2b3c4d".into(),
            require_checkpoint: false,
            max_runtime: Duration::from_secs(3600),
        }
    }

    /// The operator itself stops the job at `--max-runtime` (a replica OOM-killed over and
    /// over is recreated without end under `ExitCode`, kubeflow/trainer#2045), and deletes
    /// the replicas still running once the job ended, keeping the terminated ones' logs.
    #[test]
    fn the_run_policy_bounds_the_job_and_cleans_up_running_replicas() {
        let m = spec(2).manifest();
        let policy = &m["spec"]["runPolicy"];
        assert_eq!(policy["activeDeadlineSeconds"], 3600, "{policy}");
        assert_eq!(policy["cleanPodPolicy"], "Running", "{policy}");
        assert_eq!(policy["backoffLimit"], 3, "{policy}");
        let short = PyTorchJobSpec {
            max_runtime: Duration::from_secs(90),
            ..spec(1)
        }
        .manifest();
        assert_eq!(short["spec"]["runPolicy"]["activeDeadlineSeconds"], 90);
    }

    /// Every replica's kubelet waits past the trainer's stop grace (30 s) before SIGKILL.
    #[test]
    fn replicas_get_the_trainers_stop_grace_and_a_margin_before_sigkill() {
        let m = spec(2).manifest();
        for t in ["Master", "Worker"] {
            let grace = &m["spec"]["pytorchReplicaSpecs"][t]["template"]["spec"]
                ["terminationGracePeriodSeconds"];
            assert_eq!(grace, 45, "{t}");
        }
    }

    /// Each turn of `Restarting` to `True` is one restart; its staying `True` across updates,
    /// or its replacement by `Running`, is none.
    #[test]
    fn restarts_are_counted_as_the_restarting_condition_turns_true() {
        let c = |t: &str, status: &str| {
            (
                t.to_string(),
                status.to_string(),
                String::new(),
                String::new(),
            )
        };
        let mut r = Restarts::default();
        let created = [c("Created", "True")];
        let running = [c("Created", "True"), c("Running", "True")];
        let restarting = [c("Created", "True"), c("Restarting", "True")];
        let restarting_false = [c("Created", "True"), c("Restarting", "False")];
        assert_eq!(r.observe(&created), 0);
        assert_eq!(r.observe(&running), 0);
        assert_eq!(r.observe(&restarting), 1);
        assert_eq!(r.observe(&restarting), 1, "the same restart seen again");
        assert_eq!(r.observe(&running), 1);
        assert_eq!(r.observe(&restarting), 2);
        assert_eq!(r.observe(&restarting_false), 2);
        assert_eq!(r.observe(&restarting), 3);
        assert_eq!(r.observe(&running), 3);
        assert_eq!(
            r.observe(&restarting),
            BACKOFF_LIMIT + 1,
            "one more than the limit"
        );
        let e = PyTorchJobError::TooManyRestarts {
            name: "demo".into(),
            namespace: "team".into(),
            restarts: 4,
            limit: BACKOFF_LIMIT,
            conditions: describe(&restarting),
        };
        let e = e.to_string();
        assert!(
            e.starts_with(
                "PyTorchJob demo restarted its replicas 4 times, more than its backoffLimit of 3"
            ) && e.ends_with("delete it with: kubectl -n team delete pytorchjob demo"),
            "{e}"
        );
    }

    /// A timeout leaves the job running: the message says so, and how to delete it.
    #[test]
    fn a_timeout_says_the_job_is_still_there_and_how_to_delete_it() {
        let e = PyTorchJobError::Timeout {
            name: "demo".into(),
            namespace: "team".into(),
            timeout: Duration::from_secs(60),
            conditions: "Created=True (PyTorchJobCreated)".into(),
        };
        assert_eq!(
            e.to_string(),
            "PyTorchJob demo did not finish within 60s; last conditions: Created=True \
             (PyTorchJobCreated). The job is still on the cluster; delete it with: kubectl -n \
             team delete pytorchjob demo"
        );
    }

    /// A Pod whose `pytorch` container terminated with `exit_code` at `finished` (seconds),
    /// in its current state or, `last`, its last state only.
    fn pod(name: &str, exit_code: i32, finished: Option<i64>, last: bool) -> Pod {
        let terminated = json!({
            "exitCode": exit_code,
            "reason": "Error",
            "finishedAt": finished.map(|s| {
                chrono::DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap().to_rfc3339()
            }),
        });
        let state = json!({"terminated": terminated});
        let status = if last {
            json!({"name": "pytorch", "state": {"running": {}}, "lastState": state,
                   "ready": true, "restartCount": 1, "image": "i", "imageID": ""})
        } else {
            json!({"name": "pytorch", "state": state,
                   "ready": false, "restartCount": 0, "image": "i", "imageID": ""})
        };
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"containerStatuses": [status]},
        }))
        .unwrap()
    }

    /// The replica that failed first is reported, not the first by name: a worker's crash
    /// makes the master fail after it.
    #[test]
    fn the_earliest_failure_is_reported_not_the_first_pod_by_name() {
        let pods = [
            pod("j-master-0", 130, Some(20), false),
            pod("j-worker-1", 137, Some(5), false),
            pod("j-worker-0", 0, Some(1), false),
            pod("j-worker-2", 1, None, false),
        ];
        let f = first_failure(&pods).unwrap();
        assert_eq!((f.pod.as_str(), f.exit_code), ("j-worker-1", Some(137)));
        // Without a time, by name.
        let untimed = [
            pod("j-worker-2", 1, None, false),
            pod("j-master-0", 1, None, false),
        ];
        assert_eq!(first_failure(&untimed).unwrap().pod, "j-master-0");
    }

    /// A Pod with a current termination and no last state is read (the last state is only
    /// the fallback), and one restarted in place is read from its last state.
    #[test]
    fn a_termination_is_read_with_or_without_a_last_state() {
        let f = first_failure(&[pod("j-master-0", 1, Some(3), false)]).unwrap();
        assert_eq!((f.pod.as_str(), f.exit_code), ("j-master-0", Some(1)));
        let f = first_failure(&[pod("j-worker-0", 2, Some(3), true)]).unwrap();
        assert_eq!((f.pod.as_str(), f.exit_code), ("j-worker-0", Some(2)));
        assert!(first_failure(&[pod("j-worker-0", 0, Some(3), false)]).is_none());
    }

    #[test]
    fn manifest_follows_the_operator_contract() {
        let m = spec(3).manifest();
        assert_eq!(m["apiVersion"], "kubeflow.org/v1");
        assert_eq!(m["metadata"]["namespace"], "team");
        assert_eq!(
            m["metadata"]["annotations"]["sidecar.istio.io/inject"],
            "false"
        );
        let r = &m["spec"]["pytorchReplicaSpecs"];
        assert_eq!(r["Master"]["replicas"], 1);
        assert_eq!(r["Worker"]["replicas"], 2);
        for t in ["Master", "Worker"] {
            assert_eq!(r[t]["restartPolicy"], "ExitCode");
            let pod = &r[t]["template"];
            assert_eq!(
                pod["metadata"]["annotations"]["sidecar.istio.io/inject"],
                "false"
            );
            assert_eq!(
                pod["metadata"]["labels"]["sidecar.istio.io/inject"],
                "false"
            );
            // Least privilege: no API token, the runtime's seccomp profile, no privilege
            // escalation, no capabilities.
            assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
            assert_eq!(
                pod["spec"]["securityContext"]["seccompProfile"]["type"],
                "RuntimeDefault"
            );
            let c = &pod["spec"]["containers"][0];
            assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
            assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
            assert_eq!(c["name"], "pytorch");
            assert_eq!(c["args"], json!(["train", "--hp", "epochs=2"]));
            assert_eq!(c["volumeMounts"][0]["mountPath"], EFS_MOUNT);
            assert_eq!(
                pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
                EFS_CLAIM
            );
            let env: BTreeMap<&str, &str> = c["env"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| (e["name"].as_str().unwrap(), e["value"].as_str().unwrap()))
                .collect();
            assert_eq!(env["TRAINER_DATA_DIR"], "/mnt/efs/datasets/fmnist");
            assert_eq!(env["TRAINER_MODEL_DIR"], "/mnt/efs/models/kfaws-train-1");
            assert_eq!(
                env["TRAINER_CHECKPOINT_DIR"],
                "/mnt/efs/checkpoints/kfaws-train-1/20261204T190512Z-1a2b3c4d"
            );
            assert!(!env.contains_key("TRAINER_REQUIRE_CHECKPOINT"));
        }
        let single = spec(1).manifest();
        assert!(single["spec"]["pytorchReplicaSpecs"]
            .get("Worker")
            .is_none());
    }

    #[test]
    fn a_job_that_continues_anothers_checkpoints_requires_one() {
        let m = PyTorchJobSpec {
            require_checkpoint: true,
            ..spec(2)
        }
        .manifest();
        for t in ["Master", "Worker"] {
            let env =
                &m["spec"]["pytorchReplicaSpecs"][t]["template"]["spec"]["containers"][0]["env"];
            assert!(
                env.as_array()
                    .unwrap()
                    .contains(&json!({"name": "TRAINER_REQUIRE_CHECKPOINT", "value": "true"})),
                "{t}: {env}"
            );
        }
    }

    #[test]
    fn run_ids_are_time_then_random_and_differ() {
        let (a, b) = (run_id(), run_id());
        assert_ne!(a, b);
        let (time, random) = a.split_once('-').unwrap();
        assert_eq!(time.len(), "20261204T190512Z".len(), "{a}");
        assert!(time.starts_with("20") && time.ends_with('Z'), "{a}");
        assert_eq!(random.len(), 8, "{a}");
        assert!(random.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
    }

    #[test]
    fn nccl_replicas_each_ask_for_one_nvidia_gpu() {
        let resources = |m: &Value, t: &str| {
            m["spec"]["pytorchReplicaSpecs"][t]["template"]["spec"]["containers"][0]["resources"]
                .clone()
        };
        let cpu = spec(2).manifest();
        assert!(resources(&cpu, "Master")["limits"]
            .get("nvidia.com/gpu")
            .is_none());
        let gpu = PyTorchJobSpec {
            gpu: true,
            ..spec(2)
        }
        .manifest();
        for t in ["Master", "Worker"] {
            let r = resources(&gpu, t);
            assert_eq!(r["limits"]["nvidia.com/gpu"], 1, "{t}: {r}");
            assert_eq!(r["limits"]["cpu"], "1", "{t}: {r}");
        }
    }

    #[test]
    fn an_api_error_is_told_once_without_the_status_debug_dump() {
        let status = kube::core::Status {
            code: 403,
            message: "namespace x is being terminated".into(),
            reason: "Forbidden".into(),
            ..Default::default()
        };
        let e = kube_err("creating PyTorchJob x/j")(kube::Error::Api(Box::new(status)));
        assert_eq!(
            e.to_string(),
            "creating PyTorchJob x/j: namespace x is being terminated (403 Forbidden)"
        );
        // Nothing follows in the chain an edge prints with `{:#}`.
        assert!(std::error::Error::source(&e).is_none());
    }
}
