//! `kfaws train --runtime sagemaker`: a SageMaker training job with the
//! pushed trainer image, the deployment's SageMaker execution role and
//! artifact bucket, and the `train` channel from S3 or EFS (a local
//! directory is uploaded to the bucket first, as the SageMaker Python SDK
//! does with a local `inputs` path).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use aws_config::SdkConfig;
use kfaws::sagemaker::logs::{follow_logs, follow_logs_from, FollowCursor};
use kfaws::sagemaker::resume::{self, PreviousJob};
use kfaws::sagemaker::training::{self, ChannelSource, TrainingJobSpec, TrainingStatus, VpcConfig};
use kfaws::train::data::{DataSource, LocalDataset};
use tokio_util::sync::CancellationToken;

use super::progress::Progress;
use super::train::{Deployment, Problems, Request, TrainArgs};
use super::Global;

/// The ECR repository `kfaws image push` writes by default.
pub const REPOSITORY: &str = "kfaws-trainer";

/// The trainer image `kfaws image build` and `kfaws image push` make by
/// default: the ECR repository [`REPOSITORY`], tagged with this kfaws's
/// version, resolved to `repositoryUri@sha256:…` (the tag is immutable, and
/// the digest makes the job run exactly that image).
///
/// # Errors
/// When the repository or the tag does not exist: build and push first.
pub async fn default_image(aws: &SdkConfig) -> anyhow::Result<String> {
    let tag = env!("CARGO_PKG_VERSION");
    let hint = || {
        format!(
            "no image {REPOSITORY}:{tag} in ECR: run `kfaws image build` and `kfaws image push`, \
             or pass --image"
        )
    };
    let ecr = kfaws::aws::client::<aws_sdk_ecr::Client>(aws);
    let repo = ecr
        .describe_repositories()
        .repository_names(REPOSITORY)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!(kfaws::aws::error_message(&e)))
        .with_context(hint)?;
    let uri = repo
        .repositories()
        .first()
        .and_then(|r| r.repository_uri())
        .context("DescribeRepositories answered no repository URI")?
        .to_string();
    let images = ecr
        .describe_images()
        .repository_name(REPOSITORY)
        .image_ids(
            aws_sdk_ecr::types::ImageIdentifier::builder()
                .image_tag(tag)
                .build(),
        )
        .send()
        .await
        .map_err(|e| anyhow::anyhow!(kfaws::aws::error_message(&e)))
        .with_context(hint)?;
    let digest = images
        .image_details()
        .first()
        .and_then(|d| d.image_digest())
        .with_context(hint)?;
    Ok(format!("{uri}@{digest}"))
}

/// SageMaker training jobs still running (`InProgress` or `Stopping`) that
/// this deployment started: tagged with its name and lineage. Destroy
/// refuses while one runs, since it uses the deployment's execution role,
/// bucket and (with an EFS channel) network.
///
/// # Errors
/// A failed ListTrainingJobs or ListTags call.
pub async fn running_jobs(
    aws: &SdkConfig,
    deployment: &str,
    lineage: &str,
) -> anyhow::Result<Vec<String>> {
    use aws_sdk_sagemaker::types::TrainingJobStatus;
    let sm = kfaws::aws::client::<aws_sdk_sagemaker::Client>(aws);
    let mut running = Vec::new();
    for status in [TrainingJobStatus::InProgress, TrainingJobStatus::Stopping] {
        let pages = sm
            .list_training_jobs()
            .status_equals(status)
            .into_paginator()
            .items()
            .send()
            .collect::<Vec<_>>()
            .await;
        for job in pages {
            let job = job.map_err(|e| {
                anyhow::anyhow!("ListTrainingJobs: {}", kfaws::aws::error_message(&e))
            })?;
            let (Some(name), Some(arn)) = (job.training_job_name(), job.training_job_arn()) else {
                continue;
            };
            let tags = kfaws::sagemaker::tags_of(&sm, arn).await?;
            let tag = |k: &str| tags.get(k).map(String::as_str);
            if tag("kfaws:deployment") == Some(deployment) && tag("kfaws:lineage") == Some(lineage)
            {
                running.push(name.to_string());
            }
        }
    }
    Ok(running)
}

/// Checks that an ECR image reference
/// (`ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME@sha256:…` or `…:TAG`)
/// names an image that exists (DescribeImages), so a typo fails here and
/// not after the job started. Other registries are not checked.
///
/// # Errors
/// When the repository or the image does not exist, or the call fails.
pub async fn check_image(aws: &SdkConfig, uri: &str) -> anyhow::Result<()> {
    let Some(image) = kfaws::image::inspect::EcrImage::parse(uri) else {
        return Ok(());
    };
    let id = aws_sdk_ecr::types::ImageIdentifier::builder();
    let id = match image.reference.starts_with("sha256:") {
        true => id.image_digest(&image.reference),
        false => id.image_tag(&image.reference),
    };
    kfaws::aws::client::<aws_sdk_ecr::Client>(aws)
        .describe_images()
        .registry_id(&image.account)
        .repository_name(&image.repository)
        .image_ids(id.build())
        .send()
        .await
        .map_err(|e| anyhow::anyhow!(kfaws::aws::error_message(&e)))
        .with_context(|| format!("--image {uri}: no such image in ECR"))?;
    Ok(())
}

/// The SageMaker role policy `stack.iam` was applied with (`full` or `scoped`), if recorded.
pub(crate) fn role_policy(d: &Deployment) -> Option<&str> {
    d.state
        .resources
        .get(&kfaws::address::Address::new("stack.iam").expect("a valid address"))
        .and_then(|r| r.spec["parameters"]["SageMakerRolePolicy"].as_str())
}

/// What to tell a user about `what` (a `--data` channel, a model artifact) in S3 bucket
/// `bucket` that the deployment's SageMaker execution role cannot read: with `policy` (the
/// `SageMakerRolePolicy` parameter `stack.iam` was applied with) `scoped`, the role may read
/// only the `artifact` bucket (`stacks/iam.yaml`), so SageMaker fails to download it
/// (AccessDenied) minutes after the submit, unless that bucket's own policy grants the role
/// access. `None` otherwise.
pub(crate) fn scoped_role_warning(
    policy: Option<&str>,
    artifact: &str,
    what: &str,
    bucket: &str,
) -> Option<String> {
    (policy == Some("scoped") && bucket != artifact).then(|| {
        format!(
            "{what}: this deployment's SageMaker execution role is scoped \
             (options.sagemaker_role_policy = \"scoped\") and may read only the artifact \
             bucket {artifact}, so SageMaker will fail to read it unless bucket {bucket}'s \
             policy grants the role access; copy it into s3://{artifact}/, or set \
             options.sagemaker_role_policy = \"full\" and apply"
        )
    })
}

/// Checks that an S3 data prefix holds at least one object.
async fn check_s3_prefix(aws: &SdkConfig, bucket: &str, prefix: &str) -> anyhow::Result<()> {
    let out = kfaws::aws::bucket::client(aws)
        .list_objects_v2()
        .bucket(bucket)
        .prefix(prefix)
        .max_keys(1)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", kfaws::aws::error_message(&e)))
        .with_context(|| format!("--data s3://{bucket}/{prefix}: cannot list it"))?;
    if out.key_count().unwrap_or(0) == 0 {
        bail!("--data s3://{bucket}/{prefix}: no object under this prefix");
    }
    Ok(())
}

/// Deletes the objects under `s3://bucket/prefix/` (a local `--data` upload's prefix, once no
/// job of its name exists: what is there was left by an attempt whose CreateTrainingJob
/// failed), so the job's channel holds only this upload. Returns how many were deleted; with
/// the bucket's versioning their versions stay recoverable.
async fn clear_prefix(aws: &SdkConfig, bucket: &str, prefix: &str) -> anyhow::Result<usize> {
    let s3 = kfaws::aws::bucket::client(aws);
    let mut pages = s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(format!("{prefix}/"))
        .into_paginator()
        .send();
    let mut deleted = 0;
    while let Some(page) = pages.next().await {
        let page = page
            .map_err(|e| anyhow::anyhow!("{}", kfaws::aws::error_message(&e)))
            .with_context(|| format!("listing s3://{bucket}/{prefix}/"))?;
        let ids = page
            .contents()
            .iter()
            .filter_map(|o| o.key())
            .map(|k| {
                aws_sdk_s3::types::ObjectIdentifier::builder()
                    .key(k)
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        if ids.is_empty() {
            continue;
        }
        let n = ids.len();
        let out = s3
            .delete_objects()
            .bucket(bucket)
            .delete(
                aws_sdk_s3::types::Delete::builder()
                    .set_objects(Some(ids))
                    .quiet(true)
                    .build()?,
            )
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{}", kfaws::aws::error_message(&e)))
            .with_context(|| format!("deleting under s3://{bucket}/{prefix}/"))?;
        if let Some(e) = out.errors().first() {
            bail!(
                "deleting s3://{bucket}/{}: {}",
                e.key().unwrap_or_default(),
                e.message().unwrap_or("refused")
            );
        }
        deleted += n;
    }
    Ok(deleted)
}

/// Every regular file under `dir`, sorted. Anything else that is not a
/// directory (a FIFO, socket or device, which S3 cannot hold) is left out
/// with a warning naming it.
fn files_under(dir: &Path) -> walkdir::Result<Vec<PathBuf>> {
    walkdir::WalkDir::new(dir)
        // A symbolic link is read as what it points to, as the trainer's check reads it (a
        // link loop is an error naming the path).
        .follow_links(true)
        .sort_by_file_name()
        .into_iter()
        .filter(|e| {
            let Ok(e) = e else { return true };
            let t = e.file_type();
            if !t.is_file() && !t.is_dir() {
                tracing::warn!(
                    "{} is not a regular file (a FIFO, socket or device): not uploaded",
                    e.path().display()
                );
            }
            t.is_file()
        })
        .map(|e| e.map(walkdir::DirEntry::into_path))
        .collect()
}

/// Uploads `files` (relative path under `dir` → size, as [`files_with_sizes`] lists them) to
/// `s3://bucket/prefix/<relative path>`, one at a time, stopping before the next file once
/// `cancel` fires; returns how many were uploaded. Each object carries the SHA-256 of its
/// content, computed by the SDK and checked by S3 (PutObject `ChecksumAlgorithm`), which
/// `--resume-from` compares with local files.
async fn upload_dir(
    aws: &SdkConfig,
    dir: &Path,
    files: &BTreeMap<String, u64>,
    bucket: &str,
    prefix: &str,
    cancel: &CancellationToken,
) -> anyhow::Result<usize> {
    let s3 = kfaws::aws::bucket::upload_client(aws);
    for (uploaded, rel) in files.keys().enumerate() {
        if cancel.is_cancelled() {
            return Ok(uploaded);
        }
        let (f, key) = (dir.join(rel), format!("{prefix}/{rel}"));
        let body = aws_sdk_s3::primitives::ByteStream::from_path(&f)
            .await
            .with_context(|| format!("reading {}", f.display()))?;
        s3.put_object()
            .bucket(bucket)
            .key(&key)
            .checksum_algorithm(aws_sdk_s3::types::ChecksumAlgorithm::Sha256)
            .body(body)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!(kfaws::aws::error_message(&e)))
            .with_context(|| format!("uploading {} to s3://{bucket}/{key}", f.display()))?;
    }
    Ok(files.len())
}

/// What `--resume-from` settled: the job resumed, the checkpoints the new job continues from,
/// and, for a local `--data` directory holding the same files as the channel the resumed job
/// read, that channel (the files are not uploaded again).
struct Resume {
    previous: PreviousJob,
    /// The instance count and hyperparameters the new job runs with: the flags given, and the
    /// resumed job's values for those left out.
    instance_count: i32,
    hyperparameters: BTreeMap<String, String>,
    checkpoint_s3_uri: String,
    channel: Option<String>,
    /// `(epoch, step)` of the newest checkpoint there, where the trainer starts.
    from: (u64, u64),
}

/// Every object under an S3 URI's prefix, as path relative to it → size in bytes.
async fn objects_under(aws: &SdkConfig, uri: &str) -> anyhow::Result<BTreeMap<String, u64>> {
    let DataSource::S3 { bucket, prefix } = DataSource::parse(uri)? else {
        bail!("{uri} is not an S3 URI");
    };
    let prefix = match prefix.trim_end_matches('/') {
        "" => String::new(),
        p => format!("{p}/"),
    };
    let mut pages = kfaws::aws::bucket::client(aws)
        .list_objects_v2()
        .bucket(&bucket)
        .prefix(&prefix)
        .into_paginator()
        .send();
    let mut out = BTreeMap::new();
    while let Some(page) = pages.next().await {
        let page = page
            .map_err(|e| anyhow::anyhow!("{}", kfaws::aws::error_message(&e)))
            .with_context(|| format!("listing {uri}"))?;
        for o in page.contents() {
            if let Some(rel) = o.key().and_then(|k| k.strip_prefix(&prefix)) {
                let size = u64::try_from(o.size().unwrap_or(0)).unwrap_or(0);
                out.insert(rel.to_string(), size);
            }
        }
    }
    Ok(out)
}

/// The strongest full-object checksum S3 stored for each object `rels` under the S3 URI's
/// prefix, as relative path → (algorithm, base64 value): HeadObject with `ChecksumMode`
/// enabled, 16 calls at a time; SHA-256 first, then SHA-1, CRC64NVME, CRC32C, CRC32. kfaws
/// uploads with SHA-256, the AWS SDKs add CRC32 by default, and S3 gives objects uploaded
/// without one a CRC64NVME (Amazon S3 User Guide, "Checking object integrity"). An object with
/// only a checksum of parts (a multipart upload's `value-N`) is left out.
async fn stored_checksums(
    aws: &SdkConfig,
    uri: &str,
    rels: Vec<String>,
) -> anyhow::Result<BTreeMap<String, (aws_smithy_checksums::ChecksumAlgorithm, String)>> {
    use aws_smithy_checksums::ChecksumAlgorithm as Algorithm;
    use futures::{StreamExt as _, TryStreamExt as _};
    let DataSource::S3 { bucket, prefix } = DataSource::parse(uri)? else {
        bail!("{uri} is not an S3 URI");
    };
    let prefix = match prefix.trim_end_matches('/') {
        "" => String::new(),
        p => format!("{p}/"),
    };
    let s3 = kfaws::aws::bucket::client(aws);
    let (s3, bucket, prefix) = (&s3, &bucket, &prefix);
    let heads = futures::stream::iter(rels).map(|rel| async move {
        let key = format!("{prefix}{rel}");
        let head = s3
            .head_object()
            .bucket(bucket)
            .key(&key)
            .checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{}", kfaws::aws::error_message(&e)))
            .with_context(|| format!("reading s3://{bucket}/{key}"))?;
        if !full_object(head.checksum_type(), head.e_tag()) {
            return anyhow::Ok((rel, None));
        }
        let strongest = [
            (Algorithm::Sha256, head.checksum_sha256()),
            (Algorithm::Sha1, head.checksum_sha1()),
            (Algorithm::Crc64Nvme, head.checksum_crc64_nvme()),
            (Algorithm::Crc32c, head.checksum_crc32_c()),
            (Algorithm::Crc32, head.checksum_crc32()),
        ]
        .into_iter()
        // Base64 has no '-': a value with one is a checksum of parts.
        .find_map(|(algorithm, value)| Some((algorithm, value.filter(|v| !v.contains('-'))?)))
        .map(|(algorithm, value)| (algorithm, value.to_string()));
        anyhow::Ok((rel, strongest))
    });
    let found: Vec<_> = heads.buffer_unordered(16).try_collect().await?;
    Ok(found
        .into_iter()
        .filter_map(|(rel, stored)| Some((rel, stored?)))
        .collect())
}

/// Whether an object's checksums are of the whole object: S3's `ChecksumType` says so
/// (`FULL_OBJECT`, not `COMPOSITE`); where it is not told (older objects, some S3-compatible
/// stores), only a single-part upload's are, and a multipart upload's ETag ends in
/// `-<parts>` (Amazon S3 User Guide, "Checking object integrity").
fn full_object(
    checksum_type: Option<&aws_sdk_s3::types::ChecksumType>,
    e_tag: Option<&str>,
) -> bool {
    match checksum_type {
        Some(t) => *t == aws_sdk_s3::types::ChecksumType::FullObject,
        None => !e_tag.is_some_and(|t| t.trim_matches('"').contains('-')),
    }
}

/// The checksum of each file `wanted` (relative path under `dir` → algorithm), base64 as S3
/// gives checksums; stops with an error once `cancel` fires.
fn local_checksums(
    dir: &Path,
    wanted: Vec<(String, aws_smithy_checksums::ChecksumAlgorithm)>,
    cancel: &CancellationToken,
) -> anyhow::Result<BTreeMap<String, String>> {
    use std::io::Read as _;
    let mut out = BTreeMap::new();
    let mut buf = vec![0u8; 1 << 20];
    for (rel, algorithm) in wanted {
        let path = dir.join(&rel);
        let read = |e| anyhow::Error::new(e).context(format!("reading {}", path.display()));
        let mut file = std::fs::File::open(&path).map_err(read)?;
        let mut checksum = algorithm.into_impl();
        loop {
            if cancel.is_cancelled() {
                bail!("interrupted");
            }
            let n = file.read(&mut buf).map_err(read)?;
            if n == 0 {
                break;
            }
            checksum.update(&buf[..n]);
        }
        let value = checksum.header_value();
        out.insert(rel, value.to_str().expect("base64 is ASCII").to_string());
    }
    Ok(out)
}

/// [`data_difference`] when nothing is left under the channel's prefix.
const DATA_GONE: &str = "(gone)";

/// Whether the local `dir` holds the files S3 holds under `uri`: the first difference in
/// paths or sizes, else in content where S3 stored a full-object checksum
/// ([`stored_checksums`]; objects without one are compared by size only, with a warning);
/// `None` when they are the same; [`DATA_GONE`] when nothing is under `uri`. Returns early
/// with an error once `cancel` fires.
async fn data_difference(
    aws: &SdkConfig,
    dir: &Path,
    uri: &str,
    cancel: &CancellationToken,
) -> anyhow::Result<Option<String>> {
    let here = local_files(dir).await?;
    let there = objects_under(aws, uri).await?;
    if there.is_empty() {
        return Ok(Some(DATA_GONE.to_string()));
    }
    if let Some(difference) = resume::first_file_difference(&here, &there) {
        return Ok(Some(difference));
    }
    let stored = tokio::select! {
        stored = stored_checksums(aws, uri, there.keys().cloned().collect()) => stored?,
        () = cancel.cancelled() => bail!("interrupted"),
    };
    let unchecked: Vec<&str> = there
        .keys()
        .filter(|rel| !stored.contains_key(*rel))
        .map(String::as_str)
        .collect();
    if !unchecked.is_empty() {
        let more = match unchecked.len() {
            n if n > 5 => format!(" and {} more", n - 5),
            _ => String::new(),
        };
        tracing::warn!(
            "{uri}: {} of {} objects have no full-object checksum, compared with --data by size \
             only: {}{more}",
            unchecked.len(),
            there.len(),
            unchecked[..unchecked.len().min(5)].join(", ")
        );
    }
    let wanted = stored
        .iter()
        .map(|(rel, (a, _))| (rel.clone(), *a))
        .collect();
    let (walked, stopper) = (dir.to_path_buf(), cancel.clone());
    let local = tokio::task::spawn_blocking(move || local_checksums(&walked, wanted, &stopper))
        .await
        .context("reading the --data directory")??;
    let stored = stored
        .into_iter()
        .map(|(rel, (algorithm, value))| (rel, (algorithm.as_str().to_uppercase(), value)))
        .collect();
    Ok(resume::first_content_difference(&local, &stored))
}

/// [`files_with_sizes`] off the async threads (a large directory is many `stat` calls).
async fn local_files(dir: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let walked = dir.to_path_buf();
    tokio::task::spawn_blocking(move || files_with_sizes(&walked))
        .await
        .context("reading the --data directory")?
}

/// Every file under a local directory, as relative path → size in bytes.
fn files_with_sizes(dir: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let files = files_under(dir).map_err(|e| {
        let path = e.path().unwrap_or(dir).display().to_string();
        let why = match (e.loop_ancestor(), e.io_error()) {
            (Some(ancestor), _) => format!(
                "a symbolic link loop (it points to its ancestor {})",
                ancestor.display()
            ),
            (None, Some(io)) => io.to_string(),
            (None, None) => e.to_string(),
        };
        anyhow::anyhow!(
            "--data {}: cannot read {path}: {why}. kfaws reads every file under the directory, \
             following symbolic links, to upload it or compare it with S3: remove that entry, or \
             point --data at a directory holding only the dataset",
            dir.display()
        )
    })?;
    files
        .into_iter()
        .map(|f| {
            let size = std::fs::metadata(&f)
                .with_context(|| format!("reading {}", f.display()))?
                .len();
            let rel = f.strip_prefix(dir).expect("under dir");
            Ok((rel.to_string_lossy().replace('\\', "/"), size))
        })
        .collect()
}

/// What [`channel_of`] read to find a channel, handed on to [`train`] so that the
/// deployment, the caller's credentials and the resumed training job are read once.
pub struct ReadBefore {
    deployment: Deployment,
    aws: SdkConfig,
    previous: PreviousJob,
}

/// `--data` for a `--resume-from OLD` without it: the source of the channel `OLD` read, as
/// `--data` spells it (`s3://…`, `efs:/…`), said on standard output, with what was read to
/// find it.
///
/// # Errors
/// When the deployment, its credentials or `OLD` cannot be read, and when `OLD`'s channel is
/// neither S3 nor EFS.
pub async fn channel_of(
    g: &Global,
    old: &str,
    cancel: &CancellationToken,
) -> anyhow::Result<(String, ReadBefore)> {
    let deployment = Deployment::load(g)?;
    let aws = deployment.aws(g, cancel).await?;
    let sm = kfaws::aws::client::<aws_sdk_sagemaker::Client>(&aws);
    let previous = resume::previous_job(&sm, old)
        .await
        .with_context(|| format!("--resume-from {old}"))?;
    let data = match &previous.input {
        Some(ChannelSource::S3 { uri }) => uri.clone(),
        Some(ChannelSource::Efs { directory_path, .. }) => format!("efs:{directory_path}"),
        None => bail!(
            "--resume-from {old}: its {} channel is neither S3 nor EFS; pass --data",
            training::CHANNEL
        ),
    };
    say(&format!(
        "--data {data}: the channel training job {old} read"
    ));
    Ok((
        data,
        ReadBefore {
            deployment,
            aws,
            previous,
        },
    ))
}

/// `--resume-from OLD`: reads training job `OLD` and reports every reason the new job
/// (`requested`, whose data is `data`) cannot continue from its checkpoints
/// ([`resume::problems`]), that a local `--data` directory holds other data than the
/// channel it read, or that its checkpoint prefix is empty. The instance count and the
/// hyperparameters not in `given` ([`TrainArgs::given_keys`]) are `OLD`'s
/// ([`resume::settings`]). `read` is `OLD` when [`channel_of`] already described it.
async fn resume_from(
    aws: &SdkConfig,
    old: &str,
    read: Option<PreviousJob>,
    data: &DataSource,
    requested: resume::Requested<'_>,
    given: &BTreeSet<String>,
    cancel: &CancellationToken,
) -> Result<Resume, Vec<anyhow::Error>> {
    let sm = kfaws::aws::client::<aws_sdk_sagemaker::Client>(aws);
    let previous = match read {
        Some(previous) => previous,
        None => resume::previous_job(&sm, old)
            .await
            .with_context(|| format!("--resume-from {old}"))
            .map_err(|e| vec![e])?,
    };
    let (instance_count, hyperparameters) = resume::settings(&previous, &requested, given);
    let requested = resume::Requested {
        instance_count,
        hyperparameters: &hyperparameters,
        ..requested
    };
    let mut problems: Vec<anyhow::Error> = resume::problems(&previous, &requested)
        .into_iter()
        .map(anyhow::Error::msg)
        .collect();
    let mut channel = None;
    let (deployment, lineage) = requested.deployment;
    // Another deployment's channel is not listed: its bucket is not this deployment's.
    if let (DataSource::Local(dir), true) = (data, previous.started_by(deployment, lineage)) {
        match &previous.input {
            Some(ChannelSource::S3 { uri }) => match data_difference(aws, dir, uri, cancel).await {
                Ok(None) => channel = Some(uri.clone()),
                Ok(Some(gone)) if gone == DATA_GONE => problems.push(anyhow::anyhow!(
                    "--resume-from {old}: nothing is left under {uri}, the data it read (the \
                     artifact bucket was emptied or made again since it ran); a resumed job \
                     reads the same data: start a new job without --resume-from"
                )),
                Ok(Some(difference)) => problems.push(anyhow::anyhow!(
                    "--resume-from {old}: --data {} holds other data than {uri}, the channel \
                         {old} read: {difference}; a resumed job reads the same data",
                    dir.display()
                )),
                Err(e) => problems.push(e.context(format!("--resume-from {old}"))),
            },
            Some(efs) => problems.push(anyhow::anyhow!(
                "--resume-from {old}: it read {}, --data is the local directory {}: a resumed \
                 job reads the same data",
                resume::describe_source(efs),
                dir.display()
            )),
            None => {}
        }
    }
    let (Some(checkpoints), true) = (
        previous.checkpoint_s3_uri.clone(),
        previous.started_by(deployment, lineage),
    ) else {
        return Err(problems);
    };
    let (listed, sharing) = tokio::join!(
        objects_under(aws, &checkpoints),
        jobs_writing(aws, &sm, &checkpoints, deployment, lineage, old),
    );
    let mut newest = None;
    match listed {
        Ok(found) => {
            let keys = found.keys().map(String::as_str);
            match resume::checkpoint_problem(old, &checkpoints, keys, requested.hyperparameters) {
                Some(problem) => problems.push(anyhow::Error::msg(problem)),
                None => newest = resume::newest_checkpoint(found.keys().map(String::as_str)),
            }
        }
        Err(e) => problems.push(e.context(format!("--resume-from {old}"))),
    }
    match sharing {
        Ok(jobs) => problems.extend(jobs.into_iter().map(|(job, status)| {
            anyhow::anyhow!(
                "--resume-from {old}: training job {job} (resumed from the same checkpoints) is \
                 {status} and writes to {checkpoints}; two jobs would write the same checkpoints: \
                 wait for it to end, or stop it (`aws sagemaker stop-training-job \
                 --training-job-name {job}`)"
            )
        })),
        Err(e) => problems.push(e.context(format!("--resume-from {old}"))),
    }
    match (problems.is_empty(), newest) {
        (true, Some((epoch, step, _))) => Ok(Resume {
            previous,
            instance_count,
            hyperparameters,
            checkpoint_s3_uri: checkpoints,
            channel,
            from: (epoch, step),
        }),
        _ => Err(problems),
    }
}

/// The training jobs of this deployment other than `old` that are running (`InProgress` or
/// `Stopping`) with `CheckpointConfig.S3Uri` = `checkpoints` (other jobs resumed from the
/// same checkpoints), with their status.
async fn jobs_writing(
    aws: &SdkConfig,
    sm: &aws_sdk_sagemaker::Client,
    checkpoints: &str,
    deployment: &str,
    lineage: &str,
    old: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for job in running_jobs(aws, deployment, lineage).await? {
        if job == old {
            continue;
        }
        let other = resume::previous_job(sm, &job).await?;
        let same = other
            .checkpoint_s3_uri
            .as_deref()
            .is_some_and(|uri| uri.trim_end_matches('/') == checkpoints.trim_end_matches('/'));
        if same {
            out.push((job, other.status));
        }
    }
    Ok(out)
}

fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// A local directory is read by the trainer beside this kfaws (as its `train` would) before
/// anything is uploaded: a directory the job would refuse costs no upload and no instance
/// time. Without a trainer binary beside kfaws the check is skipped (`None`); the job reports
/// the data.
async fn check_local_data(
    dir: &Path,
    dataset: Option<&String>,
) -> anyhow::Result<Option<LocalDataset>> {
    let exe = std::env::current_exe().context("cannot locate the kfaws executable")?;
    let Ok(trainer) = kfaws::train::trainer_binary(None, &exe) else {
        tracing::debug!("no kfaws-trainer beside kfaws: --data is not checked before upload");
        return Ok(None);
    };
    Ok(kfaws::train::data::check_local(&trainer, dir, dataset.map(String::as_str)).await?)
}

/// `kfaws train --runtime sagemaker`. `read` is what [`channel_of`] read, when it ran.
pub async fn train(
    g: &Global,
    args: &TrainArgs,
    req: Request,
    read: Option<ReadBefore>,
    cancel: &CancellationToken,
) -> anyhow::Result<u8> {
    let Request {
        job,
        data,
        workers,
        max_runtime,
        hyperparameters,
    } = req;
    let (d, read_aws, read_previous) = match read {
        Some(read) => (read.deployment, Some(read.aws), Some(read.previous)),
        None => (Deployment::load(g)?, None, None),
    };
    // Every check before the first call that creates something, all reported at once.
    let mut problems = Problems::default();
    let local_dataset = match &data {
        DataSource::Local(dir) => problems
            .check(check_local_data(dir, hyperparameters.get("dataset")).await)
            .flatten(),
        _ => None,
    };
    // Everything the job needs from the deployment, before any call.
    let role_arn =
        problems.check(d.output("stack.iam", "SageMakerRoleArn", "SageMaker execution role"));
    let bucket = problems.check(d.output("stack.storage", "BucketName", "artifact bucket"));
    let (vpc, file_system_id) = match &data {
        DataSource::Efs(_) => {
            let subnets =
                problems.check(d.output("stack.network", "PrivateSubnetIds", "private subnets"));
            // The EKS cluster security group: its self-referencing rule lets
            // the instances of a distributed job reach each other (SageMaker
            // requires that of the job's groups), and the mount targets admit
            // NFS from the whole VPC.
            let group = problems.check(d.output(
                "eks.cluster",
                "cluster_security_group_id",
                "cluster security group",
            ));
            let fs = problems.check(d.output("stack.efs", "FileSystemId", "EFS file system"));
            let vpc = subnets.zip(group).map(|(subnets, group)| VpcConfig {
                subnets: subnets.split(',').map(str::to_string).collect(),
                security_group_ids: vec![group],
            });
            (vpc, fs)
        }
        _ => (None, None),
    };
    problems.finish()?;
    let (role_arn, bucket) = (role_arn.expect("checked"), bucket.expect("checked"));
    if let DataSource::S3 {
        bucket: data,
        prefix,
    } = &data
    {
        let what = format!("--data s3://{data}/{prefix}");
        if let Some(warning) = scoped_role_warning(role_policy(&d), &bucket, &what, data) {
            eprintln!("Warning: {warning}");
        }
    }
    let aws = match read_aws {
        Some(aws) => aws,
        None => d.aws(g, cancel).await?,
    };
    let mut problems = Problems::default();
    // The channel asked for, as the job resumed would show it; a local directory is compared
    // by its files.
    let requested_input = match &data {
        DataSource::S3 { bucket, prefix } => Some(ChannelSource::S3 {
            uri: format!("s3://{bucket}/{prefix}"),
        }),
        DataSource::Efs(path) => file_system_id.clone().map(|fs| ChannelSource::Efs {
            file_system_id: fs,
            directory_path: path.clone(),
        }),
        DataSource::Local(_) => None,
    };
    let lineage = d.state.lineage.to_string();
    let (image, prefix, resumed) = tokio::join!(
        Deployment::image(&aws, args.image.as_ref(), &args.backend),
        async {
            match &data {
                DataSource::S3 { bucket, prefix } => check_s3_prefix(&aws, bucket, prefix).await,
                _ => Ok(()),
            }
        },
        async {
            let Some(old) = &args.resume_from else {
                return Ok(None);
            };
            let requested = resume::Requested {
                name: job.as_str(),
                instance_count: i32::try_from(workers).expect("at most 999"),
                hyperparameters: &hyperparameters,
                input: requested_input.as_ref(),
                deployment: (&d.loaded.config.name, &lineage),
            };
            let given = args.given_keys();
            resume_from(&aws, old, read_previous, &data, requested, &given, cancel)
                .await
                .map(Some)
        }
    );
    let image = problems.check(image);
    problems.check(prefix);
    let resumed = match resumed {
        Ok(resumed) => resumed,
        Err(all) => {
            all.into_iter().for_each(|e| problems.add(e));
            None
        }
    };
    // A resumed job keeps the instance type and backend of the job it continues unless given:
    // what the request checked with the flags' defaults is checked again with those.
    let instance_type = match (&args.instance_type, &resumed) {
        (Some(given), _) => given.clone(),
        (None, Some(r)) => r
            .previous
            .instance_type
            .clone()
            .unwrap_or_else(|| args.instance_type().to_string()),
        (None, None) => args.instance_type().to_string(),
    };
    if let Some(backend) = resumed
        .as_ref()
        .and_then(|r| r.hyperparameters.get("backend"))
    {
        // The request checked a --backend nccl given with an --instance-type given.
        let checked = args.backend == "nccl" && args.instance_type.is_some();
        if backend == "nccl" && !checked && !kfaws::train::has_nvidia_gpu(&instance_type) {
            problems.add(anyhow::anyhow!(
                "--resume-from {}: the job trains with backend nccl (CUDA), but instance type \
                 {instance_type} has no NVIDIA GPU; pick a P or G --instance-type, or pass \
                 --backend gloo",
                args.resume_from.as_deref().unwrap_or_default()
            ));
        }
        // The image was checked with --backend.
        if let (Some(image), true) = (&image, backend != &args.backend) {
            problems.check(super::train::check_image_backend(&aws, image, backend).await);
        }
    }
    if cancel.is_cancelled() {
        // A check cut short by the interrupt is no problem of the job's.
        say(&format!("Interrupted: training job {job} was not created."));
        return Ok(kfaws::engine::interrupt::exit_status());
    }
    problems.finish()?;
    let image = image.expect("checked");
    let (workers, hyperparameters) = match &resumed {
        Some(r) => (r.instance_count, r.hyperparameters.clone()),
        None => (
            i32::try_from(workers).expect("at most 999"),
            hyperparameters,
        ),
    };
    if let (DataSource::Local(dir), Some(found)) = (&data, &local_dataset) {
        // Said with the settled hyperparameters: a resumed job's max-train-samples may be its.
        let max = super::train::max_train_samples(&hyperparameters);
        say(&format!(
            "Dataset in {}: {}",
            dir.display(),
            found.describe(max)
        ));
    }
    // A local directory is uploaded only once the job is known to be valid:
    // a refused job leaves nothing in the bucket.
    let mut upload = None;
    let input = match data {
        DataSource::S3 { bucket, prefix } => ChannelSource::S3 {
            uri: format!("s3://{bucket}/{prefix}"),
        },
        DataSource::Efs(path) => ChannelSource::Efs {
            file_system_id: file_system_id.expect("read above"),
            directory_path: path,
        },
        DataSource::Local(dir) => {
            if let Some(uri) = resumed.as_ref().and_then(|r| r.channel.clone()) {
                say(&format!(
                    "--data {}: the same files as {uri}, which training job {} read: not \
                     uploaded again",
                    dir.display(),
                    resumed.as_ref().expect("some").previous.name
                ));
                ChannelSource::S3 { uri }
            } else {
                let prefix = format!("kfaws/datasets/{job}");
                let uri = format!("s3://{bucket}/{prefix}/");
                upload = Some((dir, prefix));
                ChannelSource::S3 { uri }
            }
        }
    };
    let spec = TrainingJobSpec {
        name: job.to_string(),
        image,
        role_arn,
        instance_type,
        instance_count: workers,
        volume_size_gb: 30,
        hyperparameters,
        input,
        output_s3_uri: format!("s3://{bucket}/kfaws/training"),
        checkpoint_s3_uri: Some(resumed.as_ref().map_or_else(
            || format!("s3://{bucket}/kfaws/checkpoints/{job}"),
            |r| r.checkpoint_s3_uri.clone(),
        )),
        max_runtime: Duration::from_secs(max_runtime),
        vpc,
        network_isolation: args.network_isolation,
        inter_container_encryption: !args.no_inter_container_encryption,
        tags: vec![
            ("kfaws:deployment".into(), d.loaded.config.name.clone()),
            ("kfaws:lineage".into(), d.state.lineage.to_string()),
        ],
    };
    training::validate(&spec)?;
    let sm = kfaws::aws::client::<aws_sdk_sagemaker::Client>(&aws);
    let interrupted = || {
        say(&format!("Interrupted: training job {job} was not created."));
        Ok(kfaws::engine::interrupt::exit_status())
    };
    if cancel.is_cancelled() {
        return interrupted();
    }
    let mut uploaded_to = None;
    if let Some((dir, prefix)) = upload {
        // The name first: the prefix is the job's, and a job of that name (running or done)
        // reads what is there.
        training::check_name_free(&sm, &spec).await?;
        if cancel.is_cancelled() {
            return interrupted();
        }
        let stale = clear_prefix(&aws, &bucket, &prefix).await?;
        if stale > 0 {
            say(&format!(
                "Removed {stale} file(s) an earlier attempt of job {job} left under \
                 s3://{bucket}/{prefix}/ (no job of that name exists)"
            ));
        }
        let files = local_files(&dir).await?;
        if files.is_empty() {
            bail!("--data {}: the directory has no files", dir.display());
        }
        say(&format!(
            "Uploading {} file(s), {}, from {} to s3://{bucket}/{prefix}/ (Ctrl-C stops before \
             the next file; no job is created)",
            files.len(),
            indicatif::HumanBytes(files.values().sum()),
            dir.display()
        ));
        let of = files.len();
        let n = upload_dir(&aws, &dir, &files, &bucket, &prefix, cancel).await?;
        let count = match n == of {
            true => format!("{n} file(s)"),
            false => format!("{n} of {of} file(s)"),
        };
        say(&format!(
            "Uploaded {count} from {} to s3://{bucket}/{prefix}/",
            dir.display()
        ));
        uploaded_to = Some(format!("s3://{bucket}/{prefix}/"));
    }
    if cancel.is_cancelled() {
        // Interrupted while checking or uploading: no job is made after the interrupt.
        if let Some(uri) = uploaded_to {
            say(&format!(
                "What was uploaded for it stays under {uri} until the next run of job name \
                 {job} clears it."
            ));
        }
        return interrupted();
    }
    let arn = training::create_training_job(&sm, &spec).await?;
    say(&format!(
        "Training job {job} (sagemaker): {} × {}, image {}\n  {arn}",
        spec.instance_count, spec.instance_type, spec.image
    ));
    if let Some(r) = &resumed {
        let changed = kfaws::train::resume::describe_changed(&kfaws::train::resume::changed(
            &r.previous.hyperparameters,
            &spec.hyperparameters,
        ));
        say(&format!(
            "  resumes training job {} ({}) from the newest checkpoint in {}: epoch {}, step \
             {}{changed}",
            r.previous.name, r.previous.status, r.checkpoint_s3_uri, r.from.0, r.from.1
        ));
    }
    if args.no_wait {
        say(&format!(
            "Not waiting (--no-wait). Check it with `aws sagemaker describe-training-job \
             --training-job-name {job}` or the SageMaker console."
        ));
        return Ok(0);
    }
    let logs = kfaws::aws::client::<aws_sdk_cloudwatchlogs::Client>(&aws);
    let timeout = Duration::from_secs(max_runtime + 3600);
    // Not a child of `cancel`: the reader of the output going away (`| head`)
    // stops the waiting, never the job (only a signal to kfaws stops the job).
    let output_closed = CancellationToken::new();
    let progress = Progress::new(output_closed.clone());
    // With --follow, the final status line waits for the log's last lines.
    let final_status: std::sync::Mutex<Option<String>> = std::sync::Mutex::default();
    let waiting = training::wait_training_job(&sm, job.as_str(), timeout, |e| {
        let secondary = e.secondary_status.as_deref().unwrap_or("-");
        let message = e.message.as_deref().unwrap_or("");
        let line = format!(
            "  [{:>5.0}s] {} / {secondary} {message}",
            e.elapsed.as_secs_f64(),
            e.status
        );
        let terminal = matches!(e.status.as_str(), "Completed" | "Failed" | "Stopped");
        if args.follow && terminal {
            *final_status
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(line);
        } else {
            progress.line(&line);
        }
    });
    tokio::pin!(waiting);
    let mut cursor: Option<FollowCursor> = None;
    let mut stopping = false;
    let mut tick = tokio::time::interval(Duration::from_secs(3));
    let outcome = loop {
        tokio::select! {
            outcome = &mut waiting => break outcome.with_context(|| format!(
                "waiting for training job {job} failed; the job itself may still be running: \
                 check it with `aws sagemaker describe-training-job --training-job-name {job}`"
            ))?,
            () = cancel.cancelled(), if !stopping => {
                stopping = true;
                say(&format!("Interrupted: stopping training job {job} (StopTrainingJob; the trainer checkpoints on SIGTERM)."));
                training::stop_training_job(&sm, job.as_str()).await?;
            }
            () = output_closed.cancelled(), if !stopping => {
                errln!(
                    "Standard output was closed: stopped waiting. Training job {job} keeps \
                     running; check it with `aws sagemaker describe-training-job \
                     --training-job-name {job}`, stop it with `aws sagemaker stop-training-job \
                     --training-job-name {job}`."
                );
                return Err(super::progress::closed());
            }
            _ = tick.tick(), if args.follow => {
                let print = |l: &kfaws::sagemaker::logs::LogLine| {
                    progress.line(&format!("  [{}] {}", l.host().unwrap_or(&l.stream), l.message));
                };
                let pass = match &cursor {
                    None => follow_logs(&logs, job.as_str(), None, print).await,
                    Some(c) => follow_logs_from(&logs, job.as_str(), c, print).await,
                };
                match pass {
                    Ok(c) => cursor = Some(c),
                    Err(e) => tracing::warn!("reading the job's log: {e}"),
                }
            }
        }
    };
    if args.follow {
        // The lines written after the last pass.
        let print = |l: &kfaws::sagemaker::logs::LogLine| {
            say(&format!(
                "  [{}] {}",
                l.host().unwrap_or(&l.stream),
                l.message
            ));
        };
        let _ = match &cursor {
            None => follow_logs(&logs, job.as_str(), None, print).await,
            Some(c) => follow_logs_from(&logs, job.as_str(), c, print).await,
        };
    }
    let last = final_status
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(line) = last {
        say(&line);
    }
    match outcome.status {
        TrainingStatus::Completed => {
            say(&format!(
                "Training job {job} completed. Model artifact: {}",
                outcome
                    .model_artifact
                    .as_deref()
                    .unwrap_or("(none reported)")
            ));
            let metrics = kfaws::train::FinalMetrics::from(outcome.final_metrics.clone());
            if !metrics.is_empty() {
                say(&format!("Final metrics: {metrics}"));
            }
            Ok(0)
        }
        TrainingStatus::Stopped if stopping => {
            say(&format!(
                "Training job {job} stopped. To continue it from its checkpoints, run the same \
                 `kfaws train` with --resume-from {job} and another --job-name."
            ));
            Ok(kfaws::engine::interrupt::exit_status())
        }
        _ => bail!(
            "{}",
            unfinished(job.as_str(), &outcome, spec.checkpoint_s3_uri.as_deref())
        ),
    }
}

/// Why training job `job` ended `Failed`, or `Stopped` without this kfaws
/// stopping it, and, for a stopped job with checkpoints (`checkpoints`, its
/// `CheckpointConfig.S3Uri`), how to continue it. A stopped job is said by
/// its `SecondaryStatus`, explained, then SageMaker's `FailureReason` if it
/// gives one; a failed one by its `FailureReason`, else its secondary status
/// (Amazon SageMaker API Reference, DescribeTrainingJob, `SecondaryStatus`:
/// <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeTrainingJob.html>).
fn unfinished(
    job: &str,
    outcome: &training::TrainingJobOutcome,
    checkpoints: Option<&str>,
) -> String {
    let status = outcome.status;
    let secondary = outcome.secondary_status.as_deref();
    let reason = outcome.failure_reason.as_deref();
    let why = match (reason, secondary) {
        (_, Some(secondary)) if status == TrainingStatus::Stopped => {
            let explained = match secondary {
                "MaxRuntimeExceeded" => {
                    " (the job ran past --max-runtime, its StoppingCondition.MaxRuntimeInSeconds)"
                }
                "MaxWaitTimeExceeded" => {
                    " (the job waited past its StoppingCondition.MaxWaitTimeInSeconds)"
                }
                "Interrupted" => " (its managed spot instances were interrupted)",
                "Stopped" => {
                    " (StopTrainingJob was called from elsewhere: the console, the AWS CLI or \
                     another process)"
                }
                _ => "",
            };
            let reason = reason.map_or_else(String::new, |r| format!(": {r}"));
            format!("stopped: {secondary}{explained}{reason}")
        }
        (Some(reason), _) => format!("{status}: {reason}"),
        (None, Some(secondary)) => {
            format!("{status}: no FailureReason given (secondary status {secondary})")
        }
        (None, None) => format!("{status}: no FailureReason or SecondaryStatus given"),
    };
    let resume = match (status, checkpoints) {
        (TrainingStatus::Stopped, Some(uri)) => format!(
            "; its checkpoints are in {uri}: to continue it, run the same `kfaws train` with \
             --resume-from {job} and another --job-name (and a larger --max-runtime if it needs \
             more time)"
        ),
        _ => String::new(),
    };
    format!("training job {job} {why}{resume}")
}

#[cfg(test)]
mod tests {

    #[test]
    fn data_outside_the_artifact_bucket_is_warned_of_only_for_a_scoped_role() {
        let what = "--data s3://datasets/mnist";
        let warning = scoped_role_warning(Some("scoped"), "art", what, "datasets").unwrap();
        assert!(
            warning.starts_with("--data s3://datasets/mnist: ")
                && warning.contains("may read only the artifact bucket art")
                && warning.contains("options.sagemaker_role_policy = \"full\""),
            "{warning}"
        );
        assert_eq!(
            scoped_role_warning(Some("scoped"), "art", what, "art"),
            None
        );
        assert_eq!(
            scoped_role_warning(Some("full"), "art", what, "datasets"),
            None
        );
        assert_eq!(scoped_role_warning(None, "art", what, "datasets"), None);
    }
    use super::*;
    use aws_sdk_s3::types::ChecksumType;

    fn outcome(
        status: TrainingStatus,
        secondary: Option<&str>,
        reason: Option<&str>,
    ) -> training::TrainingJobOutcome {
        training::TrainingJobOutcome {
            name: "fmnist-1".into(),
            arn: None,
            status,
            secondary_status: secondary.map(str::to_string),
            model_artifact: None,
            failure_reason: reason.map(str::to_string),
            final_metrics: BTreeMap::new(),
            billable_seconds: None,
            training_seconds: None,
            history: Default::default(),
        }
    }

    #[test]
    fn a_job_sagemaker_stopped_says_why_and_how_to_continue_it() {
        let checkpoints = Some("s3://b/kfaws/checkpoints/fmnist-1");
        let stopped = outcome(TrainingStatus::Stopped, Some("MaxRuntimeExceeded"), None);
        assert_eq!(
            unfinished("fmnist-1", &stopped, checkpoints),
            "training job fmnist-1 stopped: MaxRuntimeExceeded (the job ran past --max-runtime, \
             its StoppingCondition.MaxRuntimeInSeconds); its checkpoints are in \
             s3://b/kfaws/checkpoints/fmnist-1: to continue it, run the same `kfaws train` with \
             --resume-from fmnist-1 and another --job-name (and a larger --max-runtime if it \
             needs more time)"
        );
        assert_eq!(
            unfinished("fmnist-1", &stopped, None),
            "training job fmnist-1 stopped: MaxRuntimeExceeded (the job ran past --max-runtime, \
             its StoppingCondition.MaxRuntimeInSeconds)"
        );
        let by_hand = outcome(
            TrainingStatus::Stopped,
            Some("Stopped"),
            Some("stopped by ops"),
        );
        let e = unfinished("fmnist-1", &by_hand, checkpoints);
        assert!(
            e.starts_with(
                "training job fmnist-1 stopped: Stopped (StopTrainingJob was called from \
                 elsewhere: the console, the AWS CLI or another process): stopped by ops; its \
                 checkpoints"
            ) && e.contains("--resume-from fmnist-1 and another --job-name"),
            "{e}"
        );
        // A failed job is not continued from its checkpoints by default.
        let failed = outcome(
            TrainingStatus::Failed,
            Some("Failed"),
            Some("AlgorithmError: x"),
        );
        assert_eq!(
            unfinished("fmnist-1", &failed, checkpoints),
            "training job fmnist-1 Failed: AlgorithmError: x"
        );
        let unexplained = outcome(TrainingStatus::Failed, Some("Failed"), None);
        assert_eq!(
            unfinished("fmnist-1", &unexplained, checkpoints),
            "training job fmnist-1 Failed: no FailureReason given (secondary status Failed)"
        );
        let silent = outcome(TrainingStatus::Failed, None, None);
        assert_eq!(
            unfinished("fmnist-1", &silent, checkpoints),
            "training job fmnist-1 Failed: no FailureReason or SecondaryStatus given"
        );
    }

    #[test]
    fn only_regular_files_are_uploaded_and_a_fifo_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.bin"), b"x").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b.bin"), b"y").unwrap();
        assert!(std::process::Command::new("mkfifo")
            .arg(dir.path().join("pipe"))
            .status()
            .unwrap()
            .success());
        let files = files_under(dir.path()).unwrap();
        assert_eq!(
            files,
            [dir.path().join("a.bin"), dir.path().join("sub/b.bin")]
        );
    }

    #[test]
    fn only_whole_object_checksums_are_compared() {
        assert!(full_object(
            Some(&ChecksumType::FullObject),
            Some("\"abc-4\"")
        ));
        assert!(!full_object(
            Some(&ChecksumType::Composite),
            Some("\"abc\"")
        ));
        assert!(full_object(
            None,
            Some("\"9b2cf535f27731c974343645a3985328\"")
        ));
        assert!(!full_object(
            None,
            Some("\"9b2cf535f27731c974343645a3985328-4\"")
        ));
        assert!(full_object(None, None));
    }

    #[test]
    fn a_dangling_link_or_a_link_loop_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("train.bin"), b"1").unwrap();
        std::os::unix::fs::symlink(dir.path().join("gone.bin"), dir.path().join("dangling"))
            .unwrap();
        let err = files_with_sizes(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "cannot read {}",
                dir.path().join("dangling").display()
            )) && err.contains("No such file or directory")
                && err.contains("remove that entry"),
            "{err}"
        );
        std::fs::remove_file(dir.path().join("dangling")).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink(dir.path(), dir.path().join("sub").join("loop")).unwrap();
        let err = files_with_sizes(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("sub/loop") && err.contains("a symbolic link loop"),
            "{err}"
        );
    }

    #[test]
    fn files_behind_symbolic_links_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(dir.path().join("real.bin"), b"12345").unwrap();
        std::os::unix::fs::symlink(dir.path().join("real.bin"), data.join("linked.bin")).unwrap();
        std::fs::write(data.join("plain.bin"), b"1").unwrap();
        let listed = files_with_sizes(&data).unwrap();
        assert_eq!(
            listed.into_iter().collect::<Vec<_>>(),
            [("linked.bin".to_string(), 5), ("plain.bin".to_string(), 1)]
        );
    }
}
