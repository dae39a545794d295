//! `kfaws::sagemaker` against the local AWS emulator: training jobs created
//! with every field kfaws sends and described back, names refused before
//! any call, a repeated job name, stop, waits that end in `Failed` with
//! SageMaker's reason, logs read pass by pass, and endpoints deployed and
//! deleted. Run under `tests/emulator/with_emulator.sh` (`make test`
//! does); each test works in an account of its own.
//!
//! The emulator runs training jobs and endpoints from images in its local
//! registry; these tests name an image that is not there, so what they see
//! does not depend on building one: the job or endpoint fails with the
//! reason the emulator gives, as SageMaker's `FailureReason`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::aws::{fresh_account, Account};
use kfaws::sagemaker::endpoint::{self, EndpointSpec};
use kfaws::sagemaker::logs::LOG_GROUP;
use kfaws::sagemaker::training::{
    self, ChannelSource, TrainingEvent, TrainingJobSpec, TrainingStatus, VpcConfig,
};
use kfaws::sagemaker::{Kind, SageMakerError};

struct Clients {
    account: Account,
    sagemaker: aws_sdk_sagemaker::Client,
    logs: aws_sdk_cloudwatchlogs::Client,
}

async fn clients() -> Clients {
    let account = Account::new(&fresh_account()).await;
    Clients {
        sagemaker: aws_sdk_sagemaker::Client::new(&account.sdk),
        logs: aws_sdk_cloudwatchlogs::Client::new(&account.sdk),
        account,
    }
}

impl Clients {
    /// How many times `operation` of SageMaker reached the emulator.
    fn sagemaker_calls(&self, operation: &str) -> u64 {
        self.account
            .calls()
            .into_iter()
            .filter(|(service, op, _)| service == "sagemaker" && op == operation)
            .map(|(_, _, n)| n)
            .sum()
    }

    /// The next `count` calls of SageMaker `operation` in this account fail with HTTP 500
    /// (the emulator's fault rules).
    fn fail(&self, operation: &str, count: u32) {
        common::aws::control(
            "faults",
            "POST",
            &format!(
                r#"{{"service":"sagemaker","operation":"{operation}","kind":"server_error","count":{count},"account_id":"{}"}}"#,
                self.account.id
            ),
        );
    }

    /// Whether endpoint `name` is gone (DescribeEndpoint fails: "Could not find endpoint").
    async fn endpoint_gone(&self, name: &str) -> bool {
        self.sagemaker
            .describe_endpoint()
            .endpoint_name(name)
            .send()
            .await
            .is_err()
    }

    fn image(&self) -> String {
        format!(
            "{}.dkr.ecr.us-east-1.amazonaws.com/kfaws-absent@sha256:{}",
            self.account.id,
            "0".repeat(64)
        )
    }

    fn spec(&self, name: &str) -> TrainingJobSpec {
        TrainingJobSpec {
            name: name.to_string(),
            image: self.image(),
            role_arn: format!("arn:aws:iam::{}:role/kfaws-sagemaker", self.account.id),
            instance_type: "ml.m5.xlarge".into(),
            instance_count: 2,
            volume_size_gb: 30,
            hyperparameters: BTreeMap::from([
                ("epochs".to_string(), "2".to_string()),
                ("lr".to_string(), "0.01".to_string()),
            ]),
            input: ChannelSource::S3 {
                uri: "s3://kfaws-data/fashion-mnist".into(),
            },
            output_s3_uri: "s3://kfaws-artifacts/models".into(),
            checkpoint_s3_uri: Some("s3://kfaws-artifacts/checkpoints/job".into()),
            max_runtime: Duration::from_secs(7200),
            vpc: Some(VpcConfig {
                subnets: vec!["subnet-0123456789abcdef0".into()],
                security_group_ids: vec!["sg-0123456789abcdef0".into()],
            }),
            network_isolation: true,
            inter_container_encryption: true,
            tags: vec![("kfaws:deployment".into(), "ml".into())],
        }
    }
}

#[tokio::test]
async fn every_field_sent_is_described_back() {
    let c = clients().await;
    let s3 = c.spec("fields-s3");
    let efs = TrainingJobSpec {
        name: "fields-efs".into(),
        input: ChannelSource::Efs {
            file_system_id: "fs-0123456789abcdef0".into(),
            directory_path: "/fashion-mnist".into(),
        },
        network_isolation: false,
        inter_container_encryption: false,
        checkpoint_s3_uri: None,
        ..c.spec("x")
    };
    for spec in [s3, efs] {
        let arn = training::create_training_job(&c.sagemaker, &spec)
            .await
            .unwrap();
        assert!(
            arn.ends_with(&format!(":training-job/{}", spec.name)),
            "{arn}"
        );
        let job = c
            .sagemaker
            .describe_training_job()
            .training_job_name(&spec.name)
            .send()
            .await
            .unwrap();
        assert_eq!(
            training::differences(&spec, &job),
            Vec::<String>::new(),
            "{}",
            spec.name
        );
        let sent: Vec<(String, String)> = job
            .algorithm_specification()
            .unwrap()
            .metric_definitions()
            .iter()
            .map(|d| {
                (
                    d.name().unwrap_or_default().to_string(),
                    d.regex().unwrap_or_default().to_string(),
                )
            })
            .collect();
        let expected: Vec<(String, String)> = training::METRICS
            .iter()
            .map(|(n, r)| (n.to_string(), r.to_string()))
            .collect();
        assert_eq!(sent, expected);
    }
}

#[tokio::test]
async fn bad_input_is_refused_before_any_call() {
    let c = clients().await;
    let long_value = TrainingJobSpec {
        hyperparameters: BTreeMap::from([("lr".to_string(), "1".repeat(300))]),
        ..c.spec("hp")
    };
    let cases = [
        (c.spec("ml_job"), "training job name \"ml_job\" is invalid"),
        (
            c.spec(&"a".repeat(70)),
            "it is 70 characters, the limit is 1..=63",
        ),
        (
            long_value,
            "the value is 300 characters, SageMaker allows at most 256",
        ),
    ];
    for (spec, expected) in cases {
        let e = training::create_training_job(&c.sagemaker, &spec)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(expected), "{expected}: {e}");
    }
    let e = endpoint::deploy(
        &c.sagemaker,
        &EndpointSpec {
            name: "ep_1".into(),
            ..endpoint_spec(&c, "x")
        },
        Duration::from_secs(5),
        |_| {},
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            e,
            SageMakerError::InvalidName {
                kind: Kind::Endpoint,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(c.account.mutating_calls(), Vec::<String>::new());
}

#[tokio::test]
async fn a_repeated_job_name_reports_the_existing_job_and_what_differs() {
    let c = clients().await;
    let spec = c.spec("repeat");
    let arn = training::create_training_job(&c.sagemaker, &spec)
        .await
        .unwrap();

    let e = training::create_training_job(&c.sagemaker, &spec)
        .await
        .unwrap_err();
    let SageMakerError::AlreadyExists {
        arn: existing,
        differences,
        status,
        ..
    } = &e
    else {
        panic!("{e}")
    };
    assert_eq!(existing.as_deref(), Some(arn.as_str()));
    assert_eq!(differences, &Vec::<String>::new());
    assert!(status.is_some(), "{e}");
    assert!(e.to_string().contains("created with the same spec"), "{e}");

    let other = TrainingJobSpec {
        instance_count: 4,
        ..spec
    };
    let e = training::create_training_job(&c.sagemaker, &other)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SageMakerError::AlreadyExists { differences, .. } if differences == &["instance count"]),
        "{e}"
    );
    assert_eq!(c.sagemaker_calls("CreateTrainingJob"), 3);
}

#[tokio::test]
async fn a_failed_job_is_an_outcome_with_its_reason_and_transitions() {
    let c = clients().await;
    let spec = c.spec("fails");
    training::create_training_job(&c.sagemaker, &spec)
        .await
        .unwrap();
    let mut events: Vec<TrainingEvent> = Vec::new();
    let outcome =
        training::wait_training_job(&c.sagemaker, &spec.name, Duration::from_secs(120), |e| {
            events.push(e.clone())
        })
        .await
        .unwrap();
    assert_eq!(outcome.status, TrainingStatus::Failed, "{outcome:?}");
    let reason = outcome.failure_reason.clone().unwrap_or_default();
    assert!(reason.starts_with("ClientError: "), "{outcome:?}");
    assert_eq!(outcome.model_artifact, None);

    let job = c
        .sagemaker
        .describe_training_job()
        .training_job_name(&spec.name)
        .send()
        .await
        .unwrap();
    assert_eq!(job.failure_reason(), Some(reason.as_str()));
    let first = events.first().expect("the first status is reported");
    assert_eq!(
        first.secondary_status.as_deref(),
        Some("Starting"),
        "{events:?}"
    );
    let last = events.last().unwrap();
    assert_eq!(
        (last.status.as_str(), last.secondary_status.as_deref()),
        ("Failed", Some("Failed")),
        "{events:?}"
    );
    // Each transition SageMaker lists is reported exactly once.
    let reported: Vec<Option<&str>> = events
        .iter()
        .map(|e| e.secondary_status.as_deref())
        .collect();
    let listed: Vec<Option<&str>> = job
        .secondary_status_transitions()
        .iter()
        .map(|t| t.status().map(|s| s.as_str()))
        .collect();
    assert_eq!(reported, listed);
}

/// A Describe that fails past the SDK's retries ([`kfaws::aws::MAX_ATTEMPTS`]) for one poll
/// does not end the wait: it goes on to the job's end (this spec's job
/// fails in the emulator: no trainer image behind it).
#[tokio::test]
async fn a_few_failed_polls_do_not_end_the_wait() {
    let c = clients().await;
    let spec = c.spec("flaky-describe");
    training::create_training_job(&c.sagemaker, &spec)
        .await
        .unwrap();
    let failing = kfaws::aws::MAX_ATTEMPTS + 2;
    c.fail("DescribeTrainingJob", failing);
    let outcome =
        training::wait_training_job(&c.sagemaker, &spec.name, Duration::from_secs(300), |_| {})
            .await
            .unwrap();
    let described = c
        .sagemaker
        .describe_training_job()
        .training_job_name(&spec.name)
        .send()
        .await
        .unwrap();
    assert_eq!(
        Some(outcome.status.to_string().as_str()),
        described.training_job_status().map(|s| s.as_str())
    );
    assert!(c.sagemaker_calls("DescribeTrainingJob") > u64::from(failing));
}

#[tokio::test]
async fn stopping_a_finished_job_leaves_it_and_a_missing_job_is_not_found() {
    let c = clients().await;
    let spec = c.spec("stop-finished");
    training::create_training_job(&c.sagemaker, &spec)
        .await
        .unwrap();
    let outcome =
        training::wait_training_job(&c.sagemaker, &spec.name, Duration::from_secs(120), |_| {})
            .await
            .unwrap();
    training::stop_training_job(&c.sagemaker, &spec.name)
        .await
        .unwrap();
    let after =
        training::wait_training_job(&c.sagemaker, &spec.name, Duration::from_secs(5), |_| {})
            .await
            .unwrap();
    assert_eq!(after.status, outcome.status);
    assert_eq!(c.sagemaker_calls("StopTrainingJob"), 1);

    let e = training::stop_training_job(&c.sagemaker, "never-created")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SageMakerError::NotFound { kind: Kind::TrainingJob, name } if name == "never-created"),
        "{e}"
    );
    let e = training::wait_training_job(
        &c.sagemaker,
        "never-created",
        Duration::from_secs(5),
        |_| {},
    )
    .await
    .unwrap_err();
    assert!(matches!(e, SageMakerError::NotFound { .. }), "{e}");
}

async fn put_lines(c: &Clients, stream: &str, lines: &[(i64, &str)]) {
    let _ = c
        .logs
        .create_log_group()
        .log_group_name(LOG_GROUP)
        .send()
        .await;
    let _ = c
        .logs
        .create_log_stream()
        .log_group_name(LOG_GROUP)
        .log_stream_name(stream)
        .send()
        .await;
    let events: Vec<aws_sdk_cloudwatchlogs::types::InputLogEvent> = lines
        .iter()
        .map(|(t, m)| {
            aws_sdk_cloudwatchlogs::types::InputLogEvent::builder()
                .timestamp(*t)
                .message(*m)
                .build()
                .unwrap()
        })
        .collect();
    c.logs
        .put_log_events()
        .log_group_name(LOG_GROUP)
        .log_stream_name(stream)
        .set_log_events(Some(events))
        .send()
        .await
        .unwrap();
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test]
async fn logs_are_read_in_time_order_and_each_pass_continues_the_last() {
    let c = clients().await;
    let mut seen = Vec::new();
    let cursor = training::follow_logs(&c.logs, "logjob", None, |l| seen.push(l.clone()))
        .await
        .unwrap();
    assert_eq!((cursor.lines, seen.len()), (0, 0), "no log group yet");

    let t = now_ms() - 60_000;
    let metrics = "epoch=1 train_loss=0.6000; train_acc=0.7800; test_loss=0.5000; \
                   test_acc=0.8100; images_per_sec=900;";
    put_lines(
        &c,
        "logjob/algo-1-1764570000",
        &[(t, "rank 0 up"), (t + 20, metrics)],
    )
    .await;
    put_lines(&c, "logjob/algo-2-1764570000", &[(t + 10, "rank 1 up")]).await;
    put_lines(
        &c,
        "logjob-other/algo-1-1764570000",
        &[(t + 5, "another job")],
    )
    .await;

    let mut seen = Vec::new();
    let cursor = training::follow_logs(&c.logs, "logjob", None, |l| {
        seen.push((l.host().unwrap_or("?").to_string(), l.message.clone()))
    })
    .await
    .unwrap();
    let expected = [
        ("algo-1", "rank 0 up"),
        ("algo-2", "rank 1 up"),
        ("algo-1", metrics),
    ]
    .map(|(h, m)| (h.to_string(), m.to_string()));
    assert_eq!(seen, expected);
    assert_eq!(cursor.lines, 3);
    assert_eq!(cursor.next_since_ms, Some(t + 21));

    put_lines(
        &c,
        "logjob/algo-2-1764570000",
        &[(t + 20, "rank 1 epoch 1")],
    )
    .await;
    let mut more = Vec::new();
    let cursor =
        training::follow_logs_from(&c.logs, "logjob", &cursor, |l| more.push(l.message.clone()))
            .await
            .unwrap();
    assert_eq!(
        more,
        ["rank 1 epoch 1"],
        "a line of the same millisecond is not lost"
    );
    let mut none = Vec::new();
    let cursor =
        training::follow_logs_from(&c.logs, "logjob", &cursor, |l| none.push(l.message.clone()))
            .await
            .unwrap();
    assert_eq!((none.len(), cursor.lines), (0, 0));

    let mut late = Vec::new();
    training::follow_logs(&c.logs, "logjob", Some(t + 15), |l| {
        late.push(l.message.clone())
    })
    .await
    .unwrap();
    assert_eq!(late, [metrics, "rank 1 epoch 1"]);
}

fn endpoint_spec(c: &Clients, name: &str) -> EndpointSpec {
    EndpointSpec {
        name: name.to_string(),
        image: c.image(),
        model_data_url: format!("s3://kfaws-artifacts/models/{name}/output/model.tar.gz"),
        role_arn: format!("arn:aws:iam::{}:role/kfaws-sagemaker", c.account.id),
        instance_type: "ml.m5.large".into(),
        instance_count: 1,
        tags: vec![("kfaws:deployment".into(), "ml".into())],
    }
}

#[tokio::test]
async fn an_endpoint_that_cannot_start_fails_with_the_reason_and_deletes_cleanly() {
    let c = clients().await;
    let spec = endpoint_spec(&c, "ep-missing-model");
    let mut events = Vec::new();
    let e = endpoint::deploy(&c.sagemaker, &spec, Duration::from_secs(120), |m| {
        events.push(m.to_string())
    })
    .await
    .unwrap_err();
    let SageMakerError::Failed { kind, reason, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(*kind, Kind::Endpoint);
    assert!(reason.starts_with("ClientError: "), "{e}");
    assert_eq!(
        events[..3],
        [
            "CreateModel ep-missing-model",
            "CreateEndpointConfig ep-missing-model",
            "CreateEndpoint ep-missing-model"
        ]
    );

    let model = c
        .sagemaker
        .describe_model()
        .model_name(&spec.name)
        .send()
        .await
        .unwrap();
    let container = model.primary_container().unwrap();
    assert_eq!(container.image(), Some(spec.image.as_str()));
    assert_eq!(
        container.model_data_url(),
        Some(spec.model_data_url.as_str())
    );
    assert_eq!(model.execution_role_arn(), Some(spec.role_arn.as_str()));
    let config = c
        .sagemaker
        .describe_endpoint_config()
        .endpoint_config_name(&spec.name)
        .send()
        .await
        .unwrap();
    let variant = &config.production_variants()[0];
    assert_eq!(variant.model_name(), Some(spec.name.as_str()));
    assert_eq!(
        variant.instance_type().map(|t| t.as_str()),
        Some("ml.m5.large")
    );
    assert_eq!(variant.initial_instance_count(), Some(1));

    // The same deploy again finds the endpoint it created and waits for it
    // (SageMaker refuses a second CreateEndpoint of the name).
    let mut again = Vec::new();
    let e = endpoint::deploy(&c.sagemaker, &spec, Duration::from_secs(120), |m| {
        again.push(m.to_string())
    })
    .await
    .unwrap_err();
    assert!(
        again.contains(&"endpoint ep-missing-model exists with the same configuration".to_string()),
        "{again:?}"
    );
    assert!(matches!(e, SageMakerError::Failed { .. }), "{e}");

    endpoint::delete(&c.sagemaker, &spec.name).await.unwrap();
    assert!(c.endpoint_gone(&spec.name).await);
    assert!(c
        .sagemaker
        .describe_model()
        .model_name(&spec.name)
        .send()
        .await
        .is_err());
    assert!(c
        .sagemaker
        .describe_endpoint_config()
        .endpoint_config_name(&spec.name)
        .send()
        .await
        .is_err());
    endpoint::delete(&c.sagemaker, &spec.name).await.unwrap();
}

/// A DescribeEndpoint that fails past the SDK's retries ([`kfaws::aws::MAX_ATTEMPTS`]) for
/// one poll ends neither the wait for `InService` nor the delete's waits: the deploy ends
/// with the endpoint's own outcome (`Failed` here: no image behind it) and the delete
/// deletes all three resources.
#[tokio::test]
async fn a_few_failed_endpoint_polls_end_neither_the_deploy_nor_the_delete() {
    let c = clients().await;
    let spec = endpoint_spec(&c, "ep-flaky-describe");
    let failing = kfaws::aws::MAX_ATTEMPTS + 2;
    let fault = || c.fail("DescribeEndpoint", failing);
    fault();
    let e = endpoint::deploy(&c.sagemaker, &spec, Duration::from_secs(300), |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SageMakerError::Failed { reason, .. } if reason.starts_with("ClientError: ")),
        "{e}"
    );
    let after_deploy = c.sagemaker_calls("DescribeEndpoint");
    assert!(after_deploy > u64::from(failing), "{after_deploy}");

    fault();
    let deleted = endpoint::delete(&c.sagemaker, &spec.name).await.unwrap();
    assert_eq!(deleted, [Kind::Endpoint, Kind::EndpointConfig, Kind::Model]);
    assert!(c.sagemaker_calls("DescribeEndpoint") > after_deploy + u64::from(failing));
    assert!(c.endpoint_gone(&spec.name).await);
}

#[tokio::test]
async fn deleting_an_endpoint_that_never_existed_succeeds() {
    let c = clients().await;
    let deleted = endpoint::delete(&c.sagemaker, "never-deployed")
        .await
        .unwrap();
    assert!(deleted.is_empty(), "nothing existed: {deleted:?}");
    // The endpoint is read first (to wait out a Creating one); a missing one is not deleted.
    assert_eq!(c.sagemaker_calls("DescribeEndpoint"), 1);
    assert_eq!(c.sagemaker_calls("DeleteEndpoint"), 0);
    assert_eq!(c.sagemaker_calls("DeleteModel"), 1);
}

/// Tiny IDX files of `count` 28×28 images (label `i % 10`, a bright band
/// at rows `2·label`..`2·label + 3`): the trainer's Fashion-MNIST format.
fn idx_files(prefix: &str, count: usize) -> Vec<(String, Vec<u8>)> {
    let mut images = Vec::new();
    images.extend(0x0000_0803u32.to_be_bytes());
    for d in [count as u32, 28, 28] {
        images.extend(d.to_be_bytes());
    }
    let mut labels = Vec::new();
    labels.extend(0x0000_0801u32.to_be_bytes());
    labels.extend((count as u32).to_be_bytes());
    for i in 0..count {
        let label = (i % 10) as u8;
        for row in 0..28u8 {
            let bright = (2 * label..2 * label + 3).contains(&row);
            images.extend(std::iter::repeat_n(if bright { 250 } else { 5 }, 28));
        }
        labels.push(label);
    }
    vec![
        (format!("{prefix}-images-idx3-ubyte"), images),
        (format!("{prefix}-labels-idx1-ubyte"), labels),
    ]
}

/// `kfaws image build` of the workspace's trainer, then `kfaws image push`
/// to the emulator's registry as `account`; returns `repo@sha256:...`.
fn build_and_push_trainer(dir: &std::path::Path, account: &str) -> String {
    let kfaws = assert_cmd::cargo::cargo_bin("kfaws");
    let trainer = kfaws.with_file_name("kfaws-trainer");
    assert!(
        trainer.is_file(),
        "{} is built with the workspace (cargo test --workspace)",
        trainer.display()
    );
    let build = std::process::Command::new(&kfaws)
        .current_dir(dir)
        .args([
            "image",
            "build",
            "--tag",
            "kfaws-trainer:sagemaker-e2e",
            "--trainer",
        ])
        .arg(&trainer)
        .output()
        .unwrap();
    assert!(build.status.success(), "{build:?}");
    let push = std::process::Command::new(&kfaws)
        .current_dir(dir)
        .env("AWS_ACCESS_KEY_ID", account)
        .args([
            "image",
            "push",
            "--repository",
            &format!("e2e-{account}/trainer"),
        ])
        .output()
        .unwrap();
    assert!(push.status.success(), "{push:?}");
    String::from_utf8(push.stdout).unwrap().trim().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_trainer_trains_reports_its_metrics_and_serves_from_an_endpoint() {
    let c = clients().await;
    let dir = tempfile::tempdir().unwrap();
    let image = build_and_push_trainer(dir.path(), &c.account.id);
    let s3 = c.account.s3();
    let bucket = format!("kfaws-e2e-{}", c.account.id);
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    for (name, body) in idx_files("train", 40)
        .into_iter()
        .chain(idx_files("t10k", 20))
    {
        s3.put_object()
            .bucket(&bucket)
            .key(format!("data/{name}"))
            .body(body.into())
            .send()
            .await
            .unwrap();
    }
    let spec = TrainingJobSpec {
        image: image.clone(),
        hyperparameters: BTreeMap::from([
            ("epochs".to_string(), "1".to_string()),
            ("batch_size".to_string(), "8".to_string()),
            ("test_batch_size".to_string(), "10".to_string()),
            ("log_interval".to_string(), "0".to_string()),
        ]),
        input: ChannelSource::S3 {
            uri: format!("s3://{bucket}/data"),
        },
        output_s3_uri: format!("s3://{bucket}/models"),
        checkpoint_s3_uri: None,
        vpc: None,
        ..c.spec("trains")
    };
    training::create_training_job(&c.sagemaker, &spec)
        .await
        .unwrap();
    let mut statuses = Vec::new();
    let outcome =
        training::wait_training_job(&c.sagemaker, &spec.name, Duration::from_secs(300), |e| {
            statuses.push(e.to_string())
        })
        .await
        .unwrap();
    assert_eq!(
        outcome.status,
        TrainingStatus::Completed,
        "{outcome:?} {statuses:?}"
    );
    assert_eq!(
        outcome.model_artifact.as_deref(),
        Some(format!("s3://{bucket}/models/trains/output/model.tar.gz").as_str())
    );
    // The emulator applies the job's metric definitions to the trainer's
    // real output, as SageMaker does: every figure of the epoch line is found.
    let names: Vec<&str> = outcome.final_metrics.keys().map(String::as_str).collect();
    let mut expected: Vec<&str> = training::METRICS.iter().map(|(n, _)| *n).collect();
    expected.sort_unstable();
    assert_eq!(names, expected, "{outcome:?}");
    assert_eq!(outcome.final_metrics["epoch"], 1.0);
    assert!(
        (0.0..=1.0).contains(&outcome.final_metrics["test_acc"]),
        "{outcome:?}"
    );

    let mut lines = Vec::new();
    training::follow_logs(&c.logs, &spec.name, None, |l| lines.push(l.clone()))
        .await
        .unwrap();
    let mut hosts: Vec<&str> = lines.iter().filter_map(|l| l.host()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    assert_eq!(hosts, ["algo-1", "algo-2"]);
    assert!(
        lines
            .iter()
            .any(|l| l.message.contains("epoch=1 train_loss=")),
        "the epoch line is in the logs"
    );

    // What `kfaws endpoint deploy --job` reads: the job's image and artifact.
    let job = training::describe_training_job(&c.sagemaker, &spec.name)
        .await
        .unwrap();
    assert_eq!(job.status, "Completed");
    assert_eq!(job.final_metrics, outcome.final_metrics);
    let ep = EndpointSpec {
        image: job.image.clone().unwrap(),
        model_data_url: job.model_artifact.clone().unwrap(),
        ..endpoint_spec(&c, "trains")
    };
    let info = endpoint::deploy(&c.sagemaker, &ep, Duration::from_secs(120), |_| {})
        .await
        .unwrap();
    assert_eq!(
        (
            info.status.as_str(),
            info.model_name.as_str(),
            info.config_name.as_str()
        ),
        ("InService", "trains", "trains")
    );
    let rt = aws_sdk_sagemakerruntime::Client::new(&c.account.sdk);
    let pixels: Vec<u8> = (0..28 * 28)
        .map(|i| if i / 28 < 3 { 250 } else { 5 })
        .collect();
    let body = serde_json::json!({ "instances": [pixels] }).to_string();
    let answer = endpoint::invoke(&rt, "trains", "application/json", body.into_bytes())
        .await
        .unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(
        answer["score"][0].as_array().map(Vec::len),
        Some(10),
        "{answer}"
    );

    let e = endpoint::invoke(&rt, "trains", "text/csv", b"1,2".to_vec())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SageMakerError::Model { status: 415, message, .. } if message.contains("not supported")),
        "{e}"
    );
    endpoint::delete(&c.sagemaker, "trains").await.unwrap();
    let e = endpoint::invoke(&rt, "trains", "application/json", b"{}".to_vec())
        .await
        .unwrap_err();
    assert!(matches!(e, SageMakerError::Api { .. }), "{e}");

    // A job stopped while it runs ends Stopped, as an outcome.
    let long = TrainingJobSpec {
        name: "stopped".into(),
        image,
        hyperparameters: BTreeMap::from([("epochs".to_string(), "100000".to_string())]),
        ..spec
    };
    training::create_training_job(&c.sagemaker, &long)
        .await
        .unwrap();
    // A wait that ends before the job is a timeout with what it saw.
    let e = training::wait_training_job(&c.sagemaker, "stopped", Duration::ZERO, |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SageMakerError::TimedOut { history, .. }
            if history.0.first().is_some_and(|(_, s)| s.starts_with("InProgress/"))),
        "{e}"
    );
    // Follow the logs as `kfaws train --follow` does until the first epoch
    // line: the ranks are past their rendezvous and stop at the next step.
    let mut cursor = training::follow_logs(&c.logs, "stopped", None, |_| {})
        .await
        .unwrap();
    let mut epochs = 0;
    for _ in 0..600 {
        cursor = training::follow_logs_from(&c.logs, "stopped", &cursor, |l| {
            if l.message.starts_with("epoch=") {
                epochs += 1;
            }
        })
        .await
        .unwrap();
        if epochs > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(epochs > 0, "the job logged an epoch");
    training::stop_training_job(&c.sagemaker, "stopped")
        .await
        .unwrap();
    let stopped =
        training::wait_training_job(&c.sagemaker, "stopped", Duration::from_secs(300), |_| {})
            .await
            .unwrap();
    assert_eq!(stopped.status, TrainingStatus::Stopped, "{stopped:?}");
}
