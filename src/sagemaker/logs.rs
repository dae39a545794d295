//! A training job's logs in CloudWatch Logs, read pass by pass while the
//! job runs.
//!
//! SageMaker writes each instance's stdout and stderr to log group
//! [`LOG_GROUP`], stream `<job>/algo-<instance number>-<epoch seconds>`
//! (Amazon SageMaker Developer Guide, "Log Amazon SageMaker AI events with
//! Amazon CloudWatch",
//! <https://docs.aws.amazon.com/sagemaker/latest/dg/logging-cloudwatch.html>).
//! A pass lists the job's streams (DescribeLogStreams with the prefix
//! `<job>/`) and reads each from where the previous pass stopped
//! (GetLogEvents with the stream's `nextForwardToken`; the same token coming
//! back means the end of the stream for now): Amazon CloudWatch Logs API
//! Reference,
//! <https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_DescribeLogStreams.html>
//! and
//! <https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_GetLogEvents.html>.

use std::collections::BTreeMap;

use aws_sdk_cloudwatchlogs::error::ProvideErrorMetadata;
use aws_sdk_cloudwatchlogs::Client;

use super::SageMakerError;

/// The log group of all SageMaker training jobs of a region.
pub const LOG_GROUP: &str = "/aws/sagemaker/TrainingJobs";

/// GetLogEvents pages read per stream in one pass (each up to 10,000 events or 1 MB,
/// CloudWatch Logs API Reference); the rest is read at the next pass.
const MAX_PAGES_PER_PASS: usize = 50;

/// One line a training instance wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// The log stream, `<job>/algo-<n>-<epoch seconds>`.
    pub stream: String,
    /// When the line was written, milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// The line, without its line break.
    pub message: String,
}

impl LogLine {
    /// The instance that wrote the line, `algo-<n>`, from the stream name;
    /// `None` for a stream not named the SageMaker way.
    pub fn host(&self) -> Option<&str> {
        let (_, rest) = self.stream.split_once('/')?;
        let (host, seconds) = rest.rsplit_once('-')?;
        (host.starts_with("algo-") && seconds.chars().all(|c| c.is_ascii_digit())).then_some(host)
    }
}

/// Where a pass over a job's logs stopped: pass it to [`follow_logs_from`]
/// for the next pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FollowCursor {
    /// The `since_ms` the first pass started from (kept for every stream,
    /// including streams that appear later).
    since_ms: Option<i64>,
    /// Each stream's `nextForwardToken`.
    tokens: BTreeMap<String, String>,
    /// Lines delivered by the pass that returned this cursor.
    pub lines: usize,
    /// One millisecond after the newest line delivered so far: a
    /// `since_ms` for [`follow_logs`] that skips what was delivered. Lines
    /// that arrive later with the same millisecond as the newest one are
    /// skipped too; [`follow_logs_from`] does not skip them.
    pub next_since_ms: Option<i64>,
}

/// One pass over the logs of training job `job` from `since_ms`
/// (milliseconds since the Unix epoch; `None`: from the start), calling
/// `sink` for each line in time order. A job whose logs do not exist yet
/// (no log group, no stream) has no lines.
///
/// # Errors
/// [`SageMakerError::Api`] when a CloudWatch Logs call fails.
pub async fn follow_logs(
    logs: &Client,
    job: &str,
    since_ms: Option<i64>,
    sink: impl FnMut(&LogLine),
) -> Result<FollowCursor, SageMakerError> {
    let cursor = FollowCursor {
        since_ms,
        next_since_ms: since_ms,
        ..FollowCursor::default()
    };
    follow_logs_from(logs, job, &cursor, sink).await
}

/// The next pass over the logs of `job` after the pass that returned
/// `cursor`: each stream continues exactly after its last line, so nothing
/// is delivered twice or skipped.
///
/// # Errors
/// [`SageMakerError::Api`] when a CloudWatch Logs call fails.
pub async fn follow_logs_from(
    logs: &Client,
    job: &str,
    cursor: &FollowCursor,
    mut sink: impl FnMut(&LogLine),
) -> Result<FollowCursor, SageMakerError> {
    let mut next = FollowCursor {
        lines: 0,
        ..cursor.clone()
    };
    let mut lines = Vec::new();
    for stream in streams(logs, job).await? {
        let mut token = cursor.tokens.get(&stream).cloned();
        let mut pages = 0;
        loop {
            let page = logs
                .get_log_events()
                .log_group_name(LOG_GROUP)
                .log_stream_name(&stream)
                .start_from_head(true)
                .set_start_time(cursor.since_ms)
                .set_next_token(token.clone())
                .send()
                .await
                .map_err(|e| SageMakerError::Api {
                    operation: "GetLogEvents",
                    name: format!("{LOG_GROUP} {stream}"),
                    message: crate::aws::error_message(&e),
                })?;
            lines.extend(page.events().iter().map(|e| {
                LogLine {
                    stream: stream.clone(),
                    timestamp_ms: e.timestamp().unwrap_or_default(),
                    message: e
                        .message()
                        .unwrap_or_default()
                        .trim_end_matches(['\n', '\r'])
                        .to_string(),
                }
            }));
            // The end of the stream is the token coming back unchanged; a page may be empty
            // with more events behind its token (GetLogEvents, CloudWatch Logs API
            // Reference). Pages are capped per pass: a stream still being written is read
            // on from the saved token at the next pass.
            let forward = page.next_forward_token().map(str::to_string);
            pages += 1;
            let done = forward.is_none() || forward == token || pages == MAX_PAGES_PER_PASS;
            if let Some(f) = forward.clone() {
                next.tokens.insert(stream.clone(), f);
            }
            token = forward;
            if done {
                break;
            }
        }
    }
    // Streams are read one after the other; the sort (stable, so each
    // stream keeps its order) interleaves the instances' lines by time.
    lines.sort_by_key(|l| l.timestamp_ms);
    for line in &lines {
        sink(line);
    }
    next.lines = lines.len();
    if let Some(newest) = lines.iter().map(|l| l.timestamp_ms).max() {
        next.next_since_ms = Some(next.next_since_ms.map_or(newest + 1, |s| s.max(newest + 1)));
    }
    Ok(next)
}

/// The names of the streams of `job`, `<job>/...`; none when the log group
/// does not exist yet.
async fn streams(logs: &Client, job: &str) -> Result<Vec<String>, SageMakerError> {
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = match logs
            .describe_log_streams()
            .log_group_name(LOG_GROUP)
            .log_stream_name_prefix(format!("{job}/"))
            .set_next_token(token.clone())
            .send()
            .await
        {
            Ok(page) => page,
            Err(e) if e.code() == Some("ResourceNotFoundException") => return Ok(names),
            Err(e) => {
                return Err(SageMakerError::Api {
                    operation: "DescribeLogStreams",
                    name: format!("{LOG_GROUP} {job}/"),
                    message: crate::aws::error_message(&e),
                })
            }
        };
        names.extend(
            page.log_streams()
                .iter()
                .filter_map(|s| s.log_stream_name().map(str::to_string)),
        );
        match page.next_token() {
            Some(t) if token.as_deref() != Some(t) => token = Some(t.to_string()),
            _ => break,
        }
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GetLogEvents answer: `messages` (timestamps 1, 2, ...) and the forward token.
    fn page(messages: &[&str], forward: &str) -> (u16, String) {
        let events: Vec<serde_json::Value> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| serde_json::json!({"timestamp": i + 1, "message": m, "ingestionTime": 0}))
            .collect();
        let body = serde_json::json!({
            "events": events,
            "nextForwardToken": forward,
            "nextBackwardToken": "b/0",
        });
        (200, body.to_string())
    }

    /// GetLogEvents may answer an empty page while more events lie behind its token (CloudWatch
    /// Logs API Reference): the stream ends only when the token comes back unchanged.
    #[tokio::test]
    async fn an_empty_page_with_a_new_token_is_not_the_end_of_the_stream() {
        let (url, calls) = crate::aws::loopback::json_service("Logs_20140328.", |operation, n| {
            match (operation, n) {
                ("DescribeLogStreams", _) => (
                    200,
                    r#"{"logStreams":[{"logStreamName":"job-1/algo-1-1700000000"}]}"#.into(),
                ),
                ("GetLogEvents", 1) => page(&["epoch=1"], "f/1"),
                ("GetLogEvents", 2) => page(&[], "f/2"),
                ("GetLogEvents", 3) => page(&["epoch=2"], "f/3"),
                ("GetLogEvents", _) => page(&[], "f/3"),
                _ => (400, r#"{"__type":"InvalidParameterException"}"#.into()),
            }
        })
        .await;
        let config = aws_sdk_cloudwatchlogs::Config::builder()
            .behavior_version(aws_sdk_cloudwatchlogs::config::BehaviorVersion::latest())
            .region(aws_sdk_cloudwatchlogs::config::Region::new("us-east-1"))
            .endpoint_url(url)
            .credentials_provider(aws_sdk_cloudwatchlogs::config::Credentials::for_tests())
            .build();
        let client = Client::from_conf(config);
        let mut lines = Vec::new();
        let cursor = follow_logs(&client, "job-1", None, |l| lines.push(l.message.clone()))
            .await
            .unwrap();
        assert_eq!(lines, ["epoch=1", "epoch=2"]);
        assert_eq!(cursor.lines, 2);
        let pages = calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| *c == "GetLogEvents")
            .count();
        assert_eq!(pages, 4, "read until the token came back unchanged");
    }

    #[test]
    fn the_host_comes_from_the_stream_name() {
        let line = |stream: &str| LogLine {
            stream: stream.into(),
            timestamp_ms: 0,
            message: String::new(),
        };
        assert_eq!(line("fmnist-1/algo-2-1764570000").host(), Some("algo-2"));
        assert_eq!(line("fmnist-1/other").host(), None);
        assert_eq!(line("no-slash").host(), None);
    }
}
