//! The SageMaker training container contract (docs.aws.amazon.com/sagemaker, "How Amazon
//! SageMaker Provides Training Information" and "Distributed training configuration"):
//! everything lives under a root, `/opt/ml` in a real job.

use std::path::{Path, PathBuf};

use super::ConfigError;

/// The root of the layout in a real SageMaker job.
pub const ROOT: &str = "/opt/ml";

/// The SageMaker directory layout under `root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SageMakerLayout {
    /// `/opt/ml` in a real job.
    pub root: PathBuf,
}

/// `resourceconfig.json`'s fields this trainer reads.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct ResourceConfig {
    /// This container's host name, e.g. `algo-1`.
    pub current_host: String,
    /// All host names of the job.
    pub hosts: Vec<String>,
}

/// Rank, world size and master host derived from a resource config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Index of `current_host` in the sorted host list.
    pub rank: usize,
    /// Number of hosts.
    pub world_size: usize,
    /// The first host in sorted order, rank 0.
    pub master: String,
}

impl SageMakerLayout {
    /// `root/input/config/resourceconfig.json`; its presence is what marks a SageMaker job.
    pub fn resource_config(&self) -> PathBuf {
        self.root.join("input/config/resourceconfig.json")
    }
    /// `root/input/config/hyperparameters.json`.
    pub fn hyperparameters(&self) -> PathBuf {
        self.root.join("input/config/hyperparameters.json")
    }
    /// `root/input/data`, one directory per channel.
    pub fn channels(&self) -> PathBuf {
        self.root.join("input/data")
    }
    /// `root/model`, archived to S3 as `model.tar.gz` when the job succeeds.
    pub fn model_dir(&self) -> PathBuf {
        self.root.join("model")
    }
    /// `root/checkpoints`, synchronised with the job's `CheckpointConfig.S3Uri`.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.root.join("checkpoints")
    }
    /// `root/output/failure`, whose text becomes the job's `FailureReason`.
    pub fn failure_file(&self) -> PathBuf {
        self.root.join("output/failure")
    }

    /// Whether this looks like a SageMaker job.
    pub fn is_present(&self) -> bool {
        self.resource_config().is_file()
    }

    /// Reads the placement of this host.
    ///
    /// # Errors
    /// [`ConfigError::Json`] for unreadable JSON; [`ConfigError::Contract`] when `current_host`
    /// is not among `hosts`.
    pub fn placement(&self) -> Result<Placement, ConfigError> {
        let path = self.resource_config();
        let config: ResourceConfig = read_json(&path)?;
        let mut hosts = config.hosts.clone();
        hosts.sort();
        // A host named twice would count as a rank that never joins: the job would wait out
        // the rendezvous timeout instead of failing now.
        if let Some(twice) = hosts.windows(2).find(|w| w[0] == w[1]) {
            return Err(ConfigError::Contract {
                source_name: path.display().to_string(),
                detail: format!(
                    "host {:?} appears more than once in hosts {:?}; each host is one rank",
                    twice[0], config.hosts
                ),
            });
        }
        let rank = hosts
            .iter()
            .position(|h| *h == config.current_host)
            .ok_or_else(|| ConfigError::Contract {
                source_name: path.display().to_string(),
                detail: format!(
                    "current_host {:?} is not in hosts {:?}",
                    config.current_host, config.hosts
                ),
            })?;
        Ok(Placement {
            rank,
            world_size: hosts.len(),
            master: hosts[0].clone(),
        })
    }

    /// The data directory of `channel`, or of the only channel when `channel` is `None`.
    ///
    /// # Errors
    /// [`ConfigError::Contract`] naming the channels found when the one asked for is absent or
    /// the choice is ambiguous.
    pub fn channel_dir(&self, channel: Option<&str>) -> Result<PathBuf, ConfigError> {
        let base = self.channels();
        let mut found: Vec<String> = std::fs::read_dir(&base)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        let wanted = channel.unwrap_or("training");
        if found.iter().any(|c| c == wanted) {
            return Ok(base.join(wanted));
        }
        if channel.is_none() && found.len() == 1 {
            return Ok(base.join(&found[0]));
        }
        Err(ConfigError::Contract {
            source_name: base.display().to_string(),
            detail: format!(
                "no channel {wanted:?}; channels present: {found:?} (choose one with --channel)"
            ),
        })
    }
}

pub(super) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Json {
        path: path.display().to_string(),
        detail: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| ConfigError::Json {
        path: path.display().to_string(),
        detail: kfaws_trainer_contract::json_error(&text, &e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout_with(resource: &str) -> (tempfile::TempDir, SageMakerLayout) {
        let dir = tempfile::tempdir().unwrap();
        let layout = SageMakerLayout {
            root: dir.path().to_path_buf(),
        };
        std::fs::create_dir_all(layout.resource_config().parent().unwrap()).unwrap();
        std::fs::write(layout.resource_config(), resource).unwrap();
        (dir, layout)
    }

    #[test]
    fn rank_is_index_of_current_host_in_sorted_hosts() {
        let (_d, layout) = layout_with(
            r#"{"current_host": "algo-1", "hosts": ["algo-3", "algo-1", "algo-2"], "network_interface_name": "eth0"}"#,
        );
        assert!(layout.is_present());
        assert_eq!(
            layout.placement().unwrap(),
            Placement {
                rank: 0,
                world_size: 3,
                master: "algo-1".into()
            }
        );
        let (_d, layout) =
            layout_with(r#"{"current_host": "algo-3", "hosts": ["algo-3", "algo-1", "algo-2"]}"#);
        assert_eq!(layout.placement().unwrap().rank, 2);
    }

    #[test]
    fn current_host_missing_from_hosts_is_an_error() {
        let (_d, layout) = layout_with(r#"{"current_host": "algo-9", "hosts": ["algo-1"]}"#);
        let err = layout.placement().unwrap_err().to_string();
        assert!(
            err.contains("resourceconfig.json") && err.contains("algo-9"),
            "{err}"
        );
    }

    #[test]
    fn a_host_named_twice_is_an_error() {
        let (_d, layout) =
            layout_with(r#"{"current_host": "algo-1", "hosts": ["algo-1", "algo-2", "algo-1"]}"#);
        let err = layout.placement().unwrap_err().to_string();
        assert!(
            err.contains("resourceconfig.json")
                && err.contains("host \"algo-1\" appears more than once"),
            "{err}"
        );
    }

    #[test]
    fn an_empty_resourceconfig_is_said_empty() {
        let (_d, layout) = layout_with("");
        let err = layout.placement().unwrap_err().to_string();
        assert!(
            err.ends_with("resourceconfig.json: it is empty; a JSON object was expected"),
            "{err}"
        );
    }

    #[test]
    fn channel_defaults_to_training_or_the_only_one() {
        let (_d, layout) = layout_with(r#"{"current_host": "a", "hosts": ["a"]}"#);
        std::fs::create_dir_all(layout.channels().join("train")).unwrap();
        assert_eq!(
            layout.channel_dir(None).unwrap(),
            layout.channels().join("train")
        );
        std::fs::create_dir_all(layout.channels().join("training")).unwrap();
        assert_eq!(
            layout.channel_dir(None).unwrap(),
            layout.channels().join("training")
        );
        let err = layout.channel_dir(Some("test")).unwrap_err().to_string();
        assert!(
            err.contains("\"test\"") && err.contains("\"train\", \"training\""),
            "{err}"
        );
    }
}
