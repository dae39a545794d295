//! Resuming a training job from another's checkpoints (`kfaws train
//! --runtime sagemaker --resume-from JOB`).
//!
//! A training job name cannot be reused (CreateTrainingJob, SageMaker API
//! Reference), so a stopped or failed job is continued by a new job with the
//! same `CheckpointConfig.S3Uri`: SageMaker copies that prefix to
//! `/opt/ml/checkpoints` before the container starts, and the trainer resumes
//! from the newest checkpoint there (SageMaker Developer Guide, "Use
//! checkpoints in Amazon SageMaker": "resume training from the last
//! checkpoint … the same S3 URI").
//!
//! The new job must read the same data in the same order, or the
//! checkpoint's (epoch, step) would name other examples: the same instance
//! count (world size), data source, batch size, seed, sample count and
//! dataset ([`resume::shard_problems`], the rule `kfaws train --resume`
//! applies to local jobs).

use std::collections::BTreeMap;

use aws_sdk_sagemaker::Client;

use super::training::{ChannelSource, CHANNEL};
use super::{is_not_found, tags_of, validate_name, Kind, SageMakerError};
use crate::train::resume;

/// A training job as `--resume-from` needs it: DescribeTrainingJob and
/// ListTags.
#[derive(Debug, Clone, PartialEq)]
pub struct PreviousJob {
    /// The job name.
    pub name: String,
    /// `TrainingJobStatus`: `InProgress`, `Completed`, `Failed`, `Stopping`
    /// or `Stopped`.
    pub status: String,
    /// `CheckpointConfig.S3Uri`, when the job has one.
    pub checkpoint_s3_uri: Option<String>,
    /// `ResourceConfig.InstanceCount`: its world size.
    pub instance_count: i32,
    /// `ResourceConfig.InstanceType` (`ml.g5.xlarge`), which a job resuming it keeps unless
    /// `--instance-type` says otherwise.
    pub instance_type: Option<String>,
    /// `HyperParameters`, as the job was created with them.
    pub hyperparameters: BTreeMap<String, String>,
    /// The source of its `train` channel, when it has one of S3 or EFS.
    pub input: Option<ChannelSource>,
    /// Its tags, by key.
    pub tags: BTreeMap<String, String>,
}

/// Training job `name` (DescribeTrainingJob, then ListTags on its ARN).
///
/// # Errors
/// [`SageMakerError::InvalidName`] before any call,
/// [`SageMakerError::NotFound`] when there is no such job,
/// [`SageMakerError::Api`] when a call fails.
pub async fn previous_job(client: &Client, name: &str) -> Result<PreviousJob, SageMakerError> {
    validate_name(Kind::TrainingJob, name)?;
    let job = match client
        .describe_training_job()
        .training_job_name(name)
        .send()
        .await
    {
        Ok(job) => job,
        Err(e) if is_not_found(&e) => {
            return Err(SageMakerError::NotFound {
                kind: Kind::TrainingJob,
                name: name.to_string(),
            })
        }
        Err(e) => return Err(SageMakerError::api("DescribeTrainingJob", name, &e)),
    };
    let tags = match job.training_job_arn() {
        Some(arn) => tags_of(client, arn).await?,
        None => BTreeMap::new(),
    };
    let input = job
        .input_data_config()
        .iter()
        .find(|c| c.channel_name() == Some(CHANNEL))
        .and_then(|c| c.data_source())
        .and_then(|s| {
            if let Some(s3) = s.s3_data_source() {
                return Some(ChannelSource::S3 {
                    uri: s3.s3_uri()?.to_string(),
                });
            }
            let fs = s.file_system_data_source()?;
            Some(ChannelSource::Efs {
                file_system_id: fs.file_system_id()?.to_string(),
                directory_path: fs.directory_path()?.to_string(),
            })
        });
    Ok(PreviousJob {
        name: name.to_string(),
        status: job
            .training_job_status()
            .map_or("Unknown", |s| s.as_str())
            .to_string(),
        checkpoint_s3_uri: job
            .checkpoint_config()
            .and_then(|c| c.s3_uri())
            .map(str::to_string),
        instance_count: job
            .resource_config()
            .and_then(|r| r.instance_count())
            .unwrap_or(1),
        instance_type: job
            .resource_config()
            .and_then(|r| r.instance_type())
            .map(|t| t.as_str().to_string()),
        hyperparameters: job
            .hyper_parameters()
            .map(|h| h.clone().into_iter().collect())
            .unwrap_or_default(),
        input,
        tags,
    })
}

impl PreviousJob {
    /// Whether the deployment `deployment` with state lineage `lineage` started this job
    /// (its `kfaws:deployment` and `kfaws:lineage` tags).
    pub fn started_by(&self, deployment: &str, lineage: &str) -> bool {
        let tag = |k: &str| self.tags.get(k).map(String::as_str);
        tag("kfaws:deployment") == Some(deployment) && tag("kfaws:lineage") == Some(lineage)
    }
}

/// What a new job asks for, to be compared with the job it resumes.
#[derive(Debug, Clone, Copy)]
pub struct Requested<'a> {
    /// The new job's name.
    pub name: &'a str,
    /// Its instance count.
    pub instance_count: i32,
    /// Its hyperparameters.
    pub hyperparameters: &'a BTreeMap<String, String>,
    /// Its `train` channel; `None` for a local directory not uploaded yet,
    /// which the caller compares with `previous.input` itself (by files).
    pub input: Option<&'a ChannelSource>,
    /// The `kfaws:deployment` and `kfaws:lineage` tags of the deployment
    /// starting it.
    pub deployment: (&'a str, &'a str),
}

/// How a channel source reads in messages: the S3 URI, or
/// `efs:PATH (fs-…)` as `--data` takes an EFS path.
pub fn describe_source(source: &ChannelSource) -> String {
    match source {
        ChannelSource::S3 { uri } => uri.clone(),
        ChannelSource::Efs {
            file_system_id,
            directory_path,
        } => format!("efs:{directory_path} ({file_system_id})"),
    }
}

/// Whether two channel sources name the same data: S3 URIs and EFS paths
/// compared without trailing `/`.
pub fn same_source(a: &ChannelSource, b: &ChannelSource) -> bool {
    let trim = |s: &str| s.trim_end_matches('/').to_string();
    match (a, b) {
        (ChannelSource::S3 { uri: x }, ChannelSource::S3 { uri: y }) => trim(x) == trim(y),
        (
            ChannelSource::Efs {
                file_system_id: f,
                directory_path: p,
            },
            ChannelSource::Efs {
                file_system_id: g,
                directory_path: q,
            },
        ) => f == g && trim(p) == trim(q),
        _ => false,
    }
}

/// Every reason `previous` cannot be resumed by the job `requested` (empty
/// when it can), each naming the setting, `--resume-from` and what to do:
/// - it must have been started by this deployment (its `kfaws:deployment`
///   and `kfaws:lineage` tags): its checkpoints lie in that deployment's
///   bucket, which this deployment's execution role may not read;
/// - it must have ended (`Completed`, `Failed` or `Stopped`): two jobs would
///   write the same checkpoints;
/// - it must have a `CheckpointConfig`;
/// - the instance count, the data source and the hyperparameters that fix
///   each epoch's shards must be the same ([`resume::shard_problems`]).
pub fn problems(previous: &PreviousJob, requested: &Requested<'_>) -> Vec<String> {
    let old = &previous.name;
    let mut out = Vec::new();
    if old == requested.name {
        out.push(format!(
            "--resume-from {old}: the new job needs a name of its own (--job-name), a training \
             job name cannot be reused"
        ));
    }
    let (deployment, lineage) = requested.deployment;
    if !previous.started_by(deployment, lineage) {
        out.push(format!(
            "--resume-from {old}: this deployment did not start training job {old} (its \
             kfaws:deployment and kfaws:lineage tags are not {deployment:?} and this state's \
             lineage); only a job of this deployment can be resumed"
        ));
        return out;
    }
    match previous.status.as_str() {
        "Completed" | "Failed" | "Stopped" => {}
        status => out.push(format!(
            "--resume-from {old}: training job {old} is {status}; two jobs would write the same \
             checkpoints: wait for it to end, or stop it (`aws sagemaker stop-training-job \
             --training-job-name {old}`)"
        )),
    }
    if previous.checkpoint_s3_uri.is_none() {
        out.push(format!(
            "--resume-from {old}: training job {old} has no CheckpointConfig, so there is \
             nothing to resume from"
        ));
    }
    if previous.instance_count != requested.instance_count {
        out.push(format!(
            "--resume-from {old}: it ran on {} instance(s), --workers is {}: the checkpoint's \
             position in the data holds only for the same world size (pass --workers {})",
            previous.instance_count, requested.instance_count, previous.instance_count
        ));
    }
    match (&previous.input, requested.input) {
        (Some(was), Some(now)) if !same_source(was, now) => out.push(format!(
            "--resume-from {old}: it read {}, --data is {}: a resumed job reads the same data",
            describe_source(was),
            describe_source(now)
        )),
        (None, _) => out.push(format!(
            "--resume-from {old}: its {CHANNEL} channel is neither S3 nor EFS, so kfaws cannot \
             tell whether --data is the same data"
        )),
        _ => {}
    }
    // The world size is told above, with its own remedy; the data too.
    out.extend(resume::shard_problems(
        old,
        &previous.hyperparameters,
        requested.hyperparameters,
    ));
    out
}

/// The newest checkpoint among the object keys under a checkpoint prefix (relative to it),
/// as `(epoch, step, file name)` ([`kfaws_trainer_contract::checkpoint`]: the trainer
/// resumes from the newest file directly in `/opt/ml/checkpoints`, by epoch then step; keys
/// in sub-folders are not its).
pub fn newest_checkpoint<'a>(
    keys: impl IntoIterator<Item = &'a str>,
) -> Option<(u64, u64, String)> {
    keys.into_iter()
        .filter(|key| !key.contains('/'))
        .filter_map(|name| {
            let (epoch, step) = kfaws_trainer_contract::checkpoint::parse_file_name(name)?;
            Some((epoch, step, name.to_string()))
        })
        .max()
}

/// Why the new job cannot continue from the checkpoints under `uri` (the keys found there):
/// there is none, or the newest starts past the new job's `epochs` (the trainer would train
/// nothing and only evaluate it). `None` when it can.
pub fn checkpoint_problem<'a>(
    old: &str,
    uri: &str,
    keys: impl IntoIterator<Item = &'a str>,
    hyperparameters: &BTreeMap<String, String>,
) -> Option<String> {
    let Some((epoch, step, name)) = newest_checkpoint(keys) else {
        return Some(format!(
            "--resume-from {old}: no checkpoint under {uri} (the job ended before writing one, or \
             the artifact bucket was emptied or made again since it ran); start a new job \
             without --resume-from"
        ));
    };
    let epochs = resume::epochs(hyperparameters);
    (epoch > epochs).then(|| {
        format!(
            "--resume-from {old}: the newest checkpoint under {uri} ({name}) starts epoch {epoch} \
             at step {step}, past --epochs {epochs}: the job would train nothing; pass --epochs \
             {epoch} or more (every job resumed from {old} writes its checkpoints there too)"
        )
    })
}

/// The instance count and hyperparameters a job resuming `previous` runs with: those of
/// `requested` that `given` names (`workers` for `--workers`, a hyperparameter key for its
/// flag or `--hp`), `previous`'s for the rest ([`resume::settings`]). Pure.
pub fn settings(
    previous: &PreviousJob,
    requested: &Requested<'_>,
    given: &std::collections::BTreeSet<String>,
) -> (i32, BTreeMap<String, String>) {
    let count = |n: i32| u32::try_from(n).unwrap_or(0);
    let (workers, hyperparameters) = resume::settings(
        (count(previous.instance_count), &previous.hyperparameters),
        (count(requested.instance_count), requested.hyperparameters),
        given,
    );
    (
        i32::try_from(workers).expect("from an i32"),
        hyperparameters,
    )
}

/// The first difference between the files of a local directory and the
/// objects a job read from S3, both as relative path → size in bytes:
/// `None` when they are the same files of the same sizes.
pub fn first_file_difference(
    local: &BTreeMap<String, u64>,
    uploaded: &BTreeMap<String, u64>,
) -> Option<String> {
    for (path, size) in local {
        match uploaded.get(path) {
            None => return Some(format!("{path} was not in it")),
            Some(s) if s != size => {
                return Some(format!("{path} is {size} bytes here, {s} bytes there"))
            }
            Some(_) => {}
        }
    }
    uploaded
        .keys()
        .find(|p| !local.contains_key(*p))
        .map(|p| format!("{p} is not here"))
}

/// The first file whose content differs between a local directory and the
/// objects a job read from S3 (files of the same paths and sizes, see
/// [`first_file_difference`]): `stored` maps relative path → (algorithm,
/// value) of the full-object checksum S3 stored at upload (S3 names such as
/// `SHA256` or `CRC32`, base64 values as in `x-amz-checksum-*`), `local`
/// relative path → the same algorithm's value for the local file. An object
/// without a stored checksum is absent from `stored` and not compared.
pub fn first_content_difference(
    local: &BTreeMap<String, String>,
    stored: &BTreeMap<String, (String, String)>,
) -> Option<String> {
    stored.iter().find_map(|(path, (algorithm, there))| {
        let here = local.get(path)?;
        (here != there).then(|| {
            format!(
                "{path} has the same size but other content here ({algorithm} {here}) than \
                 there ({there})"
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    fn previous() -> PreviousJob {
        PreviousJob {
            name: "first".into(),
            status: "Stopped".into(),
            checkpoint_s3_uri: Some("s3://b/kfaws/checkpoints/first".into()),
            instance_count: 2,
            instance_type: Some("ml.m5.xlarge".into()),
            hyperparameters: hp(&[("epochs", "2"), ("batch-size", "32"), ("lr", "0.02")]),
            input: Some(ChannelSource::S3 {
                uri: "s3://b/data/".into(),
            }),
            tags: [("kfaws:deployment", "ml"), ("kfaws:lineage", "L1")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn requested<'a>(
        h: &'a BTreeMap<String, String>,
        input: Option<&'a ChannelSource>,
    ) -> Requested<'a> {
        Requested {
            name: "second",
            instance_count: 2,
            hyperparameters: h,
            input,
            deployment: ("ml", "L1"),
        }
    }

    #[test]
    fn settings_left_out_are_the_resumed_jobs_not_the_defaults() {
        // The flags' values: --workers defaulted to 1, --lr given, --epochs defaulted.
        let h = hp(&[("epochs", "1"), ("batch-size", "64"), ("lr", "0.05")]);
        let mut asked = requested(&h, None);
        asked.instance_count = 1;
        let given = ["lr".to_string()].into_iter().collect();
        let (instance_count, merged) = settings(&previous(), &asked, &given);
        assert_eq!(instance_count, 2);
        assert_eq!(
            merged,
            hp(&[("epochs", "2"), ("batch-size", "32"), ("lr", "0.05")])
        );
        let given = ["workers", "batch-size"]
            .map(String::from)
            .into_iter()
            .collect();
        let (instance_count, merged) = settings(&previous(), &asked, &given);
        assert_eq!(instance_count, 1);
        assert_eq!(
            merged,
            hp(&[("epochs", "2"), ("batch-size", "64"), ("lr", "0.02")])
        );
    }

    #[test]
    fn a_stopped_job_of_this_deployment_resumes_with_more_epochs_and_another_lr() {
        let h = hp(&[("epochs", "5"), ("batch_size", "32"), ("lr", "0.01")]);
        let data = ChannelSource::S3 {
            uri: "s3://b/data".into(),
        };
        assert_eq!(
            problems(&previous(), &requested(&h, Some(&data))),
            Vec::<String>::new()
        );
        assert_eq!(
            resume::changed(&previous().hyperparameters, &h),
            vec![
                ("epochs".to_string(), "2".to_string(), "5".to_string()),
                ("lr".to_string(), "0.02".to_string(), "0.01".to_string()),
            ]
        );
    }

    #[test]
    fn every_setting_that_moves_the_data_position_is_refused_with_its_flag() {
        let h = hp(&[("epochs", "2"), ("batch-size", "64"), ("lr", "0.02")]);
        let data = ChannelSource::Efs {
            file_system_id: "fs-1".into(),
            directory_path: "/data".into(),
        };
        let mut r = requested(&h, Some(&data));
        r.instance_count = 3;
        let all = problems(&previous(), &r);
        assert_eq!(all.len(), 3, "{all:#?}");
        assert!(
            all[0].contains("ran on 2 instance(s), --workers is 3")
                && all[0].contains("--workers 2")
        );
        assert!(all[1].contains("it read s3://b/data/, --data is efs:/data (fs-1)"));
        assert!(
            all[2].contains("batch-size 32, this job asks for 64")
                && all[2].contains("(--batch-size)")
        );
        let seeded = hp(&[("epochs", "2"), ("batch-size", "32"), ("seed", "7")]);
        let first = previous();
        let all = problems(&first, &requested(&seeded, first.input.as_ref()));
        assert_eq!(all.len(), 1, "{all:#?}");
        assert!(
            all[0].contains("seed 1, this job asks for 7") && all[0].contains("(--hp seed)"),
            "{all:#?}"
        );
        // Every setting is told, not the first only; a dataset set on one side is no mismatch.
        let both = hp(&[
            ("batch-size", "64"),
            ("seed", "7"),
            ("dataset", "fashion-mnist"),
        ]);
        let all = problems(&first, &requested(&both, first.input.as_ref()));
        assert_eq!(all.len(), 2, "{all:#?}");
        assert!(
            all[0].contains("batch-size 32") && all[1].contains("seed 1"),
            "{all:#?}"
        );
    }

    #[test]
    fn a_running_foreign_or_checkpointless_job_is_refused() {
        let h = previous().hyperparameters;
        let mut running = previous();
        running.status = "InProgress".into();
        running.checkpoint_s3_uri = None;
        let all = problems(&running, &requested(&h, running.input.as_ref()));
        assert_eq!(all.len(), 2, "{all:#?}");
        assert!(all[0].contains("is InProgress") && all[0].contains("stop-training-job"));
        assert!(all[1].contains("no CheckpointConfig"));
        // Another deployment's job: only that is said, its settings do not matter.
        let mut foreign = previous();
        foreign.tags.insert("kfaws:lineage".into(), "L2".into());
        foreign.instance_count = 9;
        let all = problems(&foreign, &requested(&h, foreign.input.as_ref()));
        assert_eq!(all.len(), 1, "{all:#?}");
        assert!(all[0].contains("this deployment did not start training job first"));
        // Its own name.
        let first = previous();
        let mut r = requested(&h, first.input.as_ref());
        r.name = "first";
        assert!(problems(&first, &r)[0].contains("cannot be reused"));
    }

    #[test]
    fn the_newest_checkpoint_must_leave_an_epoch_to_train() {
        let keys = [
            "checkpoint-000002-00000000.bin",
            "checkpoint-000003-00000895.bin",
            "checkpoint-000003-00000010.bin",
            "sub/checkpoint-000009-00000000.bin",
            "model.json",
        ];
        assert_eq!(
            newest_checkpoint(keys),
            Some((3, 895, "checkpoint-000003-00000895.bin".to_string()))
        );
        let at =
            |epochs: &str| checkpoint_problem("old", "s3://b/c", keys, &hp(&[("epochs", epochs)]));
        assert_eq!(at("3"), None);
        let e = at("2").unwrap();
        assert!(
            e.contains(
                "(checkpoint-000003-00000895.bin) starts epoch 3 at step 895, past --epochs 2"
            ) && e.contains("pass --epochs 3 or more"),
            "{e}"
        );
        let e = checkpoint_problem("old", "s3://b/c", ["model.json"], &hp(&[])).unwrap();
        assert!(e.contains("no checkpoint under s3://b/c"), "{e}");
    }

    #[test]
    fn local_files_are_compared_by_relative_path_and_size() {
        let files = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(p, s)| ((*p).to_string(), *s)).collect()
        };
        let up = files(&[("a.gz", 10), ("b.gz", 20)]);
        assert_eq!(first_file_difference(&up, &up), None);
        assert_eq!(
            first_file_difference(&files(&[("a.gz", 10), ("b.gz", 21)]), &up).as_deref(),
            Some("b.gz is 21 bytes here, 20 bytes there")
        );
        assert_eq!(
            first_file_difference(&files(&[("a.gz", 10)]), &up).as_deref(),
            Some("b.gz is not here")
        );
        assert_eq!(
            first_file_difference(&files(&[("a.gz", 10), ("b.gz", 20), ("c", 1)]), &up).as_deref(),
            Some("c was not in it")
        );
    }

    #[test]
    fn same_size_files_are_compared_by_the_stored_checksum() {
        let local: BTreeMap<String, String> = [("a.gz", "AAA="), ("b.gz", "BBB=")]
            .map(|(p, d)| (p.to_string(), d.to_string()))
            .into();
        let stored = |b: Option<&str>| -> BTreeMap<String, (String, String)> {
            [("a.gz", Some("AAA=")), ("b.gz", b)]
                .into_iter()
                .filter_map(|(p, d)| Some((p.to_string(), ("SHA256".into(), d?.to_string()))))
                .collect()
        };
        assert_eq!(
            first_content_difference(&local, &stored(Some("BBB="))),
            None
        );
        assert_eq!(
            first_content_difference(&local, &stored(Some("CCC="))).as_deref(),
            Some("b.gz has the same size but other content here (SHA256 BBB=) than there (CCC=)")
        );
        // Uploaded without a checksum: not comparable, not a difference.
        assert_eq!(first_content_difference(&local, &stored(None)), None);
    }
}
