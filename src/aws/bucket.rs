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
//! Calls: HeadBucket, GetBucketTagging, ListObjectVersions, DeleteObjects
//! (at most 1,000 keys per request), from the Amazon S3 API Reference.

use aws_config::SdkConfig;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use aws_sdk_s3::Client;

use super::error_message;

/// DeleteObjects takes at most this many keys per request (S3 API Reference).
pub const DELETE_BATCH: usize = 1000;

/// An S3 client for `aws`. With an endpoint override (the local emulator)
/// requests are path-style: a virtual-hosted name under `127.0.0.1` does not
/// resolve. Against AWS itself addressing stays virtual-hosted, the default
/// S3 recommends.
pub fn client(aws: &SdkConfig) -> Client {
    let config = aws_sdk_s3::config::Builder::from(aws)
        .force_path_style(aws.endpoint_url().is_some())
        .build();
    Client::from_conf(config)
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

/// What a bucket holds: object versions plus delete markers, from the first
/// page of ListObjectVersions (`more` when there are further pages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contents {
    /// Versions and delete markers on the first page (at most 1,000).
    pub count: usize,
    /// Whether there are more than `count`.
    pub more: bool,
}

impl std::fmt::Display for Contents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.count == 1 && !self.more {
            return f.write_str("1 object version or delete marker");
        }
        let plus = if self.more { " or more" } else { "" };
        write!(f, "{}{plus} object versions and delete markers", self.count)
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
            count: out.versions().len() + out.delete_markers().len(),
            more: out.is_truncated().unwrap_or(false),
        })),
        Err(e) if e.code() == Some("NoSuchBucket") => Ok(None),
        Err(e) => Err(format!("ListObjectVersions {name}: {}", error_message(&e))),
    }
}

/// Deletes every object version and delete marker of bucket `name`, in
/// batches of at most [`DELETE_BATCH`]; returns how many it deleted. A
/// missing bucket is empty.
///
/// Each round lists the first page again rather than paging on: what the
/// previous round deleted is gone, so the listing shrinks to nothing, and a
/// version written meanwhile is still found.
///
/// # Errors
/// The SDK's message, or the first key S3 refused to delete (DeleteObjects
/// reports per-key errors in a successful response).
pub async fn empty(s3: &Client, name: &str) -> Result<usize, String> {
    let mut deleted = 0;
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
        let ids: Vec<ObjectIdentifier> = page
            .versions()
            .iter()
            .map(|v| (v.key(), v.version_id()))
            .chain(
                page.delete_markers()
                    .iter()
                    .map(|m| (m.key(), m.version_id())),
            )
            .filter_map(|(key, version)| {
                ObjectIdentifier::builder()
                    .key(key?)
                    .set_version_id(version.map(str::to_string))
                    .build()
                    .ok()
            })
            .collect();
        if ids.is_empty() {
            return Ok(deleted);
        }
        for batch in ids.chunks(DELETE_BATCH) {
            let delete = Delete::builder()
                .set_objects(Some(batch.to_vec()))
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
            deleted += batch.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Contents;

    #[test]
    fn contents_say_when_there_are_more() {
        let c = |count, more| Contents { count, more }.to_string();
        assert_eq!(c(1, false), "1 object version or delete marker");
        assert_eq!(c(3, false), "3 object versions and delete markers");
        assert_eq!(
            c(1000, true),
            "1000 or more object versions and delete markers"
        );
    }
}
