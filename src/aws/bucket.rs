//! The artifact bucket's guards: who owns a bucket name before a create, and
//! what a bucket still holds before its delete.
//!
//! Amazon S3 deletes only empty buckets (DeleteBucket: "All objects
//! (including all object versions and delete markers) in the bucket must be
//! deleted before the bucket itself can be deleted"), so a CloudFormation
//! stack that owns a bucket with objects ends `DELETE_FAILED` half way
//! through a destroy. kfaws counts the versions before anything is deleted,
//! and empties the bucket only when asked (`--force-destroy-buckets`).
//!
//! Its protective settings (default encryption, the public access block,
//! versioning) are drift when changed outside kfaws: CloudFormation's update
//! leaves a resource whose template did not change as it is, so kfaws reads
//! them ([`settings`]) and puts them back ([`put_settings`]).
//!
//! Calls: HeadBucket, GetBucketTagging, ListObjectVersions, DeleteObjects
//! (at most 1,000 keys per request), GetBucketEncryption,
//! GetPublicAccessBlock, GetBucketVersioning and their Put counterparts,
//! CreateBucket, PutBucketTagging, from the Amazon S3 API Reference.

use aws_config::SdkConfig;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::types::{
    BucketLocationConstraint, BucketVersioningStatus, CreateBucketConfiguration, Delete,
    ObjectIdentifier, PublicAccessBlockConfiguration, ServerSideEncryption,
    ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration, ServerSideEncryptionRule,
    Tag, Tagging, VersioningConfiguration,
};
use aws_sdk_s3::Client;
use serde_json::{json, Value};

use super::error_message;

/// DeleteObjects takes at most this many keys per request (S3 API Reference).
pub const DELETE_BATCH: usize = 1000;

/// An S3 client for `aws`, for every call but uploads ([`upload_client`]): each attempt
/// within [`super::ATTEMPT_TIMEOUT`] (these calls send and receive a few KiB, or a page of
/// 1,000 keys), with kfaws's retry notices and no retry once Ctrl-C was pressed, as the other
/// services' clients ([`super::clients`]). With an endpoint override (the local emulator)
/// requests are path-style: a virtual-hosted name under `127.0.0.1` does not resolve. Against
/// AWS itself addressing stays virtual-hosted, the default S3 recommends.
pub fn client(aws: &SdkConfig) -> Client {
    build(aws, Some(super::ATTEMPT_TIMEOUT))
}

/// [`client`] without the attempt timeout, for PutObject of training data: an attempt's time
/// includes sending the request body, and a large file on a slow link may take longer than
/// any fixed bound. Connecting stays bounded ([`super::CONNECT_TIMEOUT`], from `aws`).
pub fn upload_client(aws: &SdkConfig) -> Client {
    build(aws, None)
}

fn build(aws: &SdkConfig, attempt: Option<std::time::Duration>) -> Client {
    let mut config = aws_sdk_s3::config::Builder::from(aws)
        .force_path_style(aws.endpoint_url().is_some())
        .interceptor(super::clients::UnreachableNotice)
        .interceptor(super::clients::RetryNotice)
        .retry_classifier(super::clients::NoRetryOnceStopping(
            crate::engine::interrupt::stopping(),
        ));
    if let Some(attempt) = attempt {
        config = config.timeout_config(super::call_timeouts(attempt));
    }
    Client::from_conf(config.build())
}

/// Who holds a bucket name (bucket names are global across accounts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// No bucket of that name.
    Nobody,
    /// A bucket our credentials can see, with its tags (`(key, value)`).
    Visible(Vec<(String, String)>),
    /// A bucket of another account (HeadBucket answers 403 Forbidden).
    OtherAccount,
}

/// Who holds bucket `name`: HeadBucket (404 = free, 403 = another
/// account's), then GetBucketTagging for a bucket we can see.
///
/// # Errors
/// The SDK's message for any other failure.
pub async fn holder(s3: &Client, name: &str) -> Result<Holder, String> {
    match s3.head_bucket().bucket(name).send().await {
        Ok(_) => {}
        Err(e) => {
            let status = e.raw_response().map(|r| r.status().as_u16());
            return match status {
                Some(404) => Ok(Holder::Nobody),
                Some(403) => Ok(Holder::OtherAccount),
                // 301: the bucket exists in another region, so it is not
                // the one this deployment would create in its region.
                Some(301) => Ok(Holder::OtherAccount),
                _ => Err(format!("HeadBucket {name}: {}", error_message(&e))),
            };
        }
    }
    match s3.get_bucket_tagging().bucket(name).send().await {
        Ok(out) => Ok(Holder::Visible(
            out.tag_set()
                .iter()
                .map(|t| (t.key().to_string(), t.value().to_string()))
                .collect(),
        )),
        Err(e) if e.code() == Some("NoSuchTagSet") => Ok(Holder::Visible(Vec::new())),
        Err(e) => Err(format!("GetBucketTagging {name}: {}", error_message(&e))),
    }
}

/// What a bucket holds, from the first page of ListObjectVersions (at
/// most 1,000 entries; `more` when there are further pages). Shown as
/// `2 object versions and 1 delete marker`; when truncated, `more than
/// 1000 object versions and delete markers (… on the first page of its
/// listing)`. [`empty`] returns one with everything it deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Contents {
    /// Object versions on the first page (current and noncurrent).
    pub versions: usize,
    /// Delete markers on the first page.
    pub delete_markers: usize,
    /// Whether the listing has further pages.
    pub more: bool,
}

impl Contents {
    /// Versions plus delete markers on the first page; 0 for an empty bucket.
    pub fn count(&self) -> usize {
        self.versions + self.delete_markers
    }
}

impl std::fmt::Display for Contents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |count: usize, one: &str| match count {
            1 => format!("1 {one}"),
            n => format!("{n} {one}s"),
        };
        let parts = match (self.versions, self.delete_markers) {
            (v, 0) => n(v, "object version"),
            (0, m) => n(m, "delete marker"),
            (v, m) => format!("{} and {}", n(v, "object version"), n(m, "delete marker")),
        };
        if self.more {
            write!(
                f,
                "more than {} object versions and delete markers ({parts} on the first page of \
                 its listing)",
                self.count()
            )
        } else {
            f.write_str(&parts)
        }
    }
}

/// Counts what bucket `name` holds; `None` when the bucket does not exist.
///
/// # Errors
/// The SDK's message when the listing fails.
pub async fn contents(s3: &Client, name: &str) -> Result<Option<Contents>, String> {
    match s3
        .list_object_versions()
        .bucket(name)
        .max_keys(DELETE_BATCH as i32)
        .send()
        .await
    {
        Ok(out) => Ok(Some(Contents {
            versions: out.versions().len(),
            delete_markers: out.delete_markers().len(),
            more: out.is_truncated().unwrap_or(false),
        })),
        Err(e) if e.code() == Some("NoSuchBucket") => Ok(None),
        Err(e) => Err(format!("ListObjectVersions {name}: {}", error_message(&e))),
    }
}

/// Deletes every object version and delete marker of bucket `name`, in
/// batches of at most [`DELETE_BATCH`]; returns how many of each it
/// deleted (`more` is false). A missing bucket is empty.
///
/// Each round lists the first page again rather than paging on: what the
/// previous round deleted is gone, so the listing shrinks to nothing, and a
/// version written meanwhile is still found.
///
/// # Errors
/// The SDK's message, or the first key S3 refused to delete (DeleteObjects
/// reports per-key errors in a successful response).
pub async fn empty(s3: &Client, name: &str) -> Result<Contents, String> {
    let mut deleted = Contents::default();
    loop {
        let page = match s3
            .list_object_versions()
            .bucket(name)
            .max_keys(DELETE_BATCH as i32)
            .send()
            .await
        {
            Ok(page) => page,
            Err(e) if e.code() == Some("NoSuchBucket") => return Ok(deleted),
            Err(e) => return Err(format!("ListObjectVersions {name}: {}", error_message(&e))),
        };
        // `true` for a delete marker, counted apart.
        let ids: Vec<(ObjectIdentifier, bool)> = page
            .versions()
            .iter()
            .map(|v| (v.key(), v.version_id(), false))
            .chain(
                page.delete_markers()
                    .iter()
                    .map(|m| (m.key(), m.version_id(), true)),
            )
            .filter_map(|(key, version, marker)| {
                let id = ObjectIdentifier::builder()
                    .key(key?)
                    .set_version_id(version.map(str::to_string))
                    .build()
                    .ok()?;
                Some((id, marker))
            })
            .collect();
        if ids.is_empty() {
            return Ok(deleted);
        }
        for batch in ids.chunks(DELETE_BATCH) {
            let delete = Delete::builder()
                .set_objects(Some(batch.iter().map(|(id, _)| id.clone()).collect()))
                .quiet(true)
                .build()
                .map_err(|e| e.to_string())?;
            let out = s3
                .delete_objects()
                .bucket(name)
                .delete(delete)
                .send()
                .await
                .map_err(|e| format!("DeleteObjects {name}: {}", error_message(&e)))?;
            if let Some(err) = out.errors().first() {
                return Err(format!(
                    "DeleteObjects {name}: key {:?} version {:?}: {}: {}",
                    err.key().unwrap_or_default(),
                    err.version_id().unwrap_or_default(),
                    err.code().unwrap_or("UnknownError"),
                    err.message().unwrap_or("no message")
                ));
            }
            let markers = batch.iter().filter(|(_, marker)| *marker).count();
            deleted.delete_markers += markers;
            deleted.versions += batch.len() - markers;
        }
    }
}

/// The four settings of an S3 public access block, in the API's order
/// (PublicAccessBlockConfiguration, S3 API Reference).
pub const PUBLIC_ACCESS_BLOCK: [&str; 4] = [
    "BlockPublicAcls",
    "IgnorePublicAcls",
    "BlockPublicPolicy",
    "RestrictPublicBuckets",
];

/// The artifact bucket's protective settings as `stacks/storage.yaml`
/// declares them, in the shape [`settings`] reads: default encryption
/// SSE-S3 (`AES256`), every public access block setting on, versioning
/// `Enabled`.
pub fn desired_settings() -> Value {
    json!({
        "encryption": ServerSideEncryption::Aes256.as_str(),
        "public_access_block": PUBLIC_ACCESS_BLOCK
            .iter()
            .map(|k| (k.to_string(), json!(true)))
            .collect::<serde_json::Map<_, _>>(),
        "versioning": BucketVersioningStatus::Enabled.as_str(),
    })
}

/// The live settings of bucket `name`, in [`desired_settings`]' shape:
/// `encryption` the default algorithm or `null` (none), each public access
/// block setting (`false` when there is no block), `versioning` `Enabled`,
/// `Suspended` or `null` (never enabled). `None` when the bucket does not
/// exist (HeadBucket: 404).
///
/// # Errors
/// The SDK's message for a failed call.
pub async fn settings(s3: &Client, name: &str) -> Result<Option<Value>, String> {
    if let Err(e) = s3.head_bucket().bucket(name).send().await {
        if e.raw_response().map(|r| r.status().as_u16()) == Some(404) {
            return Ok(None);
        }
        return Err(format!("HeadBucket {name}: {}", error_message(&e)));
    }
    let encryption = match s3.get_bucket_encryption().bucket(name).send().await {
        Ok(out) => out
            .server_side_encryption_configuration()
            .and_then(|c| c.rules().first())
            .and_then(|r| r.apply_server_side_encryption_by_default())
            .map(|d| d.sse_algorithm().as_str().to_string()),
        Err(e) if e.code() == Some("NoSuchBucket") => return Ok(None),
        Err(e) if e.code() == Some("ServerSideEncryptionConfigurationNotFoundError") => None,
        Err(e) => return Err(format!("GetBucketEncryption {name}: {}", error_message(&e))),
    };
    let block = match s3.get_public_access_block().bucket(name).send().await {
        Ok(out) => out.public_access_block_configuration().cloned(),
        Err(e) if e.code() == Some("NoSuchBucket") => return Ok(None),
        Err(e) if e.code() == Some("NoSuchPublicAccessBlockConfiguration") => None,
        Err(e) => {
            return Err(format!(
                "GetPublicAccessBlock {name}: {}",
                error_message(&e)
            ))
        }
    };
    let block = block.unwrap_or_else(|| PublicAccessBlockConfiguration::builder().build());
    let flags = [
        block.block_public_acls(),
        block.ignore_public_acls(),
        block.block_public_policy(),
        block.restrict_public_buckets(),
    ];
    let versioning = match s3.get_bucket_versioning().bucket(name).send().await {
        Ok(out) => out.status().map(|s| s.as_str().to_string()),
        Err(e) if e.code() == Some("NoSuchBucket") => return Ok(None),
        Err(e) => return Err(format!("GetBucketVersioning {name}: {}", error_message(&e))),
    };
    Ok(Some(json!({
        "encryption": encryption,
        "public_access_block": PUBLIC_ACCESS_BLOCK
            .iter()
            .zip(flags)
            .map(|(k, on)| (k.to_string(), json!(on.unwrap_or(false))))
            .collect::<serde_json::Map<_, _>>(),
        "versioning": versioning,
    })))
}

/// Puts [`desired_settings`] back on bucket `name`: PutBucketEncryption,
/// PutPublicAccessBlock and PutBucketVersioning, each only where `live`
/// (as [`settings`] read it) differs.
///
/// # Errors
/// The SDK's message for the first failed call.
pub async fn put_settings(s3: &Client, name: &str, live: &Value) -> Result<(), String> {
    let desired = desired_settings();
    if live["encryption"] != desired["encryption"] {
        let rule = ServerSideEncryptionRule::builder()
            .apply_server_side_encryption_by_default(
                ServerSideEncryptionByDefault::builder()
                    .sse_algorithm(ServerSideEncryption::Aes256)
                    .build()
                    .map_err(|e| e.to_string())?,
            )
            .build();
        let config = ServerSideEncryptionConfiguration::builder()
            .rules(rule)
            .build()
            .map_err(|e| e.to_string())?;
        s3.put_bucket_encryption()
            .bucket(name)
            .server_side_encryption_configuration(config)
            .send()
            .await
            .map_err(|e| format!("PutBucketEncryption {name}: {}", error_message(&e)))?;
    }
    if live["public_access_block"] != desired["public_access_block"] {
        let block = PublicAccessBlockConfiguration::builder()
            .block_public_acls(true)
            .ignore_public_acls(true)
            .block_public_policy(true)
            .restrict_public_buckets(true)
            .build();
        s3.put_public_access_block()
            .bucket(name)
            .public_access_block_configuration(block)
            .send()
            .await
            .map_err(|e| format!("PutPublicAccessBlock {name}: {}", error_message(&e)))?;
    }
    if live["versioning"] != desired["versioning"] {
        let versioning = VersioningConfiguration::builder()
            .status(BucketVersioningStatus::Enabled)
            .build();
        s3.put_bucket_versioning()
            .bucket(name)
            .versioning_configuration(versioning)
            .send()
            .await
            .map_err(|e| format!("PutBucketVersioning {name}: {}", error_message(&e)))?;
    }
    Ok(())
}

/// Creates bucket `name` in `region` with `tags` (`(key, value)`), for a
/// bucket deleted outside kfaws: CreateBucket (a `LocationConstraint` outside
/// `us-east-1`, where S3 refuses one), then PutBucketTagging. The settings
/// follow with [`put_settings`].
///
/// # Errors
/// The SDK's message for a failed call.
pub async fn recreate(
    s3: &Client,
    name: &str,
    region: &str,
    tags: &[(String, String)],
) -> Result<(), String> {
    let mut create = s3.create_bucket().bucket(name);
    if region != "us-east-1" {
        create = create.create_bucket_configuration(
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::from(region))
                .build(),
        );
    }
    create
        .send()
        .await
        .map_err(|e| format!("CreateBucket {name}: {}", error_message(&e)))?;
    let tag_set = tags
        .iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let tagging = Tagging::builder()
        .set_tag_set(Some(tag_set))
        .build()
        .map_err(|e| e.to_string())?;
    s3.put_bucket_tagging()
        .bucket(name)
        .tagging(tagging)
        .send()
        .await
        .map_err(|e| format!("PutBucketTagging {name}: {}", error_message(&e)))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Contents;

    #[test]
    fn contents_name_versions_and_delete_markers_apart_and_say_when_there_are_more() {
        let c = |versions, delete_markers, more| {
            Contents {
                versions,
                delete_markers,
                more,
            }
            .to_string()
        };
        assert_eq!(c(1, 0, false), "1 object version");
        assert_eq!(c(0, 1, false), "1 delete marker");
        assert_eq!(c(2, 1, false), "2 object versions and 1 delete marker");
        assert_eq!(c(3, 2, false), "3 object versions and 2 delete markers");
        assert_eq!(
            c(900, 100, true),
            "more than 1000 object versions and delete markers (900 object versions and 100 \
             delete markers on the first page of its listing)"
        );
    }
}
