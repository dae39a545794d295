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
    /// This submission's id ([`run_id`]): the job's checkpoints go to
    /// `/checkpoints/<name>/<run>`, so the job's own restarts (`restartPolicy: ExitCode`) resume
    /// them while a later job of the same name, submitted after this one was deleted, starts
    /// afresh instead of resuming this one's epochs under other settings.
    pub run: String,
}

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

impl PyTorchJobSpec {
    /// Where rank 0 writes the model, inside the file system.
    pub fn model_path(&self) -> String {
        format!("/models/{}", self.name)
    }

    /// Where rank 0 checkpoints, inside the file system: one directory per submission.
    pub fn checkpoint_path(&self) -> String {
        format!("/checkpoints/{}/{}", self.name, self.run)
    }

    /// The `PyTorchJob` object.
    pub fn manifest(&self) -> Value {
        let mut args = vec!["train".to_string()];
        for (k, v) in &self.hyperparameters {
            args.push("--hp".into());
            args.push(format!("{k}={v}"));
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
                "containers": [{
                    "name": "pytorch",
                    "image": self.image,
                    "command": ["kfaws-trainer"],
                    "args": args,
                    "env": [
                        {"name": "TRAINER_DATA_DIR", "value": format!("{EFS_MOUNT}{}", self.data_path)},
                        {"name": "TRAINER_MODEL_DIR", "value": format!("{EFS_MOUNT}{}", self.model_path())},
                        {"name": "TRAINER_CHECKPOINT_DIR", "value": format!("{EFS_MOUNT}{}", self.checkpoint_path())},
                    ],
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
                "runPolicy": {"backoffLimit": 3, "cleanPodPolicy": "None"},
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
    /// The job did not finish in time.
    #[error("PyTorchJob {name} did not finish within {timeout:?}; last conditions: {conditions}")]
    Timeout {
        /// The job.
        name: String,
        /// The limit.
        timeout: Duration,
        /// Its last conditions.
        conditions: String,
    },
}

/// The API server's message for a refused call (its `Status`), else the
/// error itself; kube's own rendering repeats the whole `Status`.
fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
    }
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

/// Watches the job until its `Succeeded` or `Failed` condition is `True`,
/// calling `on_event` with each condition as it turns `True` (`Created`,
/// `Running`, …), in the order the job's updates arrive. A watch sees every
/// update, so a `Running` that is `True` only between two of them is not
/// missed, as a poll could miss it. A watch that breaks is re-established
/// with kube's default backoff (its error logged).
///
/// # Errors
/// [`PyTorchJobError::Timeout`] after `timeout` with the last conditions;
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
    // Whether the current (re)list has shown the job.
    let mut listed = false;
    loop {
        let event = match tokio::time::timeout_at(deadline, events.try_next()).await {
            Err(_) => {
                return Err(PyTorchJobError::Timeout {
                    name: name.to_string(),
                    timeout,
                    conditions: last
                        .iter()
                        .map(|c: &(String, String, String, String)| {
                            format!("{}={} ({})", c.0, c.1, c.2)
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
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
        last = conds;
    }
}

/// The first replica whose `pytorch` container terminated with a non-zero
/// exit code, with the termination message, or the log's last 20 lines when
/// there is none and the kubelet serves logs. `None` when no Pod says why.
pub async fn failed_replica(client: &Client, namespace: &str, job: &str) -> Option<ReplicaFailure> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods
        .list(&ListParams::default().labels(&format!("training.kubeflow.org/job-name={job}")))
        .await
        .ok()?;
    let mut failures: Vec<ReplicaFailure> = list
        .items
        .iter()
        .filter_map(|p| {
            let status = p.status.as_ref()?.container_statuses.as_ref()?;
            let c = status.iter().find(|c| c.name == "pytorch")?;
            let t = c.state.as_ref()?.terminated.as_ref().or(c
                .last_state
                .as_ref()?
                .terminated
                .as_ref())?;
            (t.exit_code != 0).then(|| ReplicaFailure {
                pod: p.metadata.name.clone().unwrap_or_default(),
                exit_code: Some(t.exit_code),
                reason: t.reason.clone().unwrap_or_default(),
                message: t.message.clone().unwrap_or_default(),
            })
        })
        .collect();
    failures.sort_by(|a, b| a.pod.cmp(&b.pod));
    let mut first = failures.into_iter().next()?;
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
            run: "20261204T190512Z-1a2b3c4d".into(),
        }
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
            let c = &pod["spec"]["containers"][0];
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
        }
        let single = spec(1).manifest();
        assert!(single["spec"]["pytorchReplicaSpecs"]
            .get("Worker")
            .is_none());
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
