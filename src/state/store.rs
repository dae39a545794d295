//! Reading and atomically writing the state file.
//!
//! Every write goes to a temporary file in the same directory (created with
//! mode 0600), is flushed to disk with `fsync`, renamed over the state file,
//! and the directory is synced so the rename itself survives a crash: at any
//! moment the file on disk is either the previous or the next complete
//! document, never a torn one (POSIX `rename(2)` atomicity).

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{State, FORMAT_VERSION};

/// Why the state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// An I/O error on the named path.
    #[error("state file {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not a state document.
    #[error(
        "state file {path} is not valid state JSON: {message}. The state a command started from \
         is kept beside it as {BACKUP_FILE} before its first write: compare the two, and copy the \
         backup over the state (while no kfaws runs) to go back to it"
    )]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// The file was written by a newer kfaws.
    #[error(
        "state file {path} has format version {found}, newer than this kfaws understands \
         ({FORMAT_VERSION}); upgrade kfaws"
    )]
    NewerFormat {
        /// The file.
        path: PathBuf,
        /// Its format version.
        found: u64,
    },
    /// The file belongs to another deployment.
    #[error("state file {path} belongs to deployment {found:?}, not {expected:?}")]
    WrongDeployment {
        /// The file.
        path: PathBuf,
        /// The deployment it records.
        found: String,
        /// The deployment asked for.
        expected: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The state file of one deployment and its in-memory copy.
#[derive(Debug)]
pub struct StateStore {
    path: PathBuf,
    state: State,
    /// The file's bytes as opened, until the first write has copied them to
    /// [`StateStore::backup_path`]; `None` for a new state, or once copied.
    unsaved_backup: Option<Vec<u8>>,
}

/// The name of the backup beside `state.json`.
pub const BACKUP_FILE: &str = "state.json.backup";

/// The directory holding one deployment's state and lock.
pub fn deployment_dir(state_dir: &Path, deployment: &str) -> PathBuf {
    state_dir.join(deployment)
}

impl StateStore {
    /// Opens the state of `deployment` under `state_dir`; an absent file is a
    /// new, empty state (nothing is written until the first change).
    ///
    /// # Errors
    /// [`StateError`] for unreadable, malformed, newer-format or foreign files.
    pub fn open(state_dir: &Path, deployment: &str) -> Result<Self, StateError> {
        let path = deployment_dir(state_dir, deployment).join("state.json");
        let (state, unsaved_backup) = match fs::read(&path) {
            Ok(bytes) => {
                let state = decode(&path, &bytes)?;
                if state.deployment != deployment {
                    return Err(StateError::WrongDeployment {
                        path,
                        found: state.deployment,
                        expected: deployment.to_string(),
                    });
                }
                (state, Some(bytes))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (State::new(deployment), None),
            Err(e) => return Err(io(&path)(e)),
        };
        Ok(Self {
            path,
            state,
            unsaved_backup,
        })
    }

    /// Where the state as opened is kept before the first write:
    /// [`BACKUP_FILE`] beside the state file.
    pub fn backup_path(&self) -> PathBuf {
        self.path.with_file_name(BACKUP_FILE)
    }

    /// The state file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current state.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Whether the file exists on disk.
    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    /// Applies `change` to a copy of the state, increments the serial and
    /// writes it atomically; the in-memory state changes only once the write
    /// succeeded. The first write of a store opened from a file first keeps
    /// that file's content as [`StateStore::backup_path`]. Blocking: call
    /// from `spawn_blocking` in async code.
    ///
    /// # Errors
    /// [`StateError::Io`] when the backup or the file cannot be written
    /// (nothing is changed when the backup fails).
    pub fn write(&mut self, change: impl FnOnce(&mut State)) -> Result<(), StateError> {
        if let Some(before) = &self.unsaved_backup {
            write_atomic(&self.backup_path(), before)?;
            self.unsaved_backup = None;
        }
        let mut next = self.state.clone();
        change(&mut next);
        next.serial = self.state.serial + 1;
        next.format_version = FORMAT_VERSION;
        next.kfaws_version = env!("CARGO_PKG_VERSION").to_string();
        let mut bytes = serde_json::to_vec_pretty(&next).expect("state always serializes");
        bytes.push(b'\n');
        write_atomic(&self.path, &bytes)?;
        self.state = next;
        Ok(())
    }
}

/// Parses a state document, upgrading older formats.
///
/// # Errors
/// [`StateError::Malformed`] or [`StateError::NewerFormat`].
pub fn decode(path: &Path, bytes: &[u8]) -> Result<State, StateError> {
    let malformed = |message: String| StateError::Malformed {
        path: path.to_path_buf(),
        message,
    };
    let value: Value = serde_json::from_slice(bytes).map_err(|e| malformed(e.to_string()))?;
    let version = value
        .get("format_version")
        .and_then(Value::as_u64)
        .ok_or_else(|| malformed("no numeric format_version".into()))?;
    if version > u64::from(FORMAT_VERSION) {
        return Err(StateError::NewerFormat {
            path: path.to_path_buf(),
            found: version,
        });
    }
    let value = upgrade(version, value).map_err(malformed)?;
    serde_json::from_value(value).map_err(|e| malformed(e.to_string()))
}

/// Upgrades a document of format `version` to [`FORMAT_VERSION`], one
/// version at a time. Format 1 is the first; each later format adds one arm.
///
/// # Errors
/// A message for a version that never existed (0).
pub fn upgrade(version: u64, value: Value) -> Result<Value, String> {
    match version {
        1 => Ok(value),
        v => Err(format!("format_version {v} never existed")),
    }
}

/// Writes `bytes` to `path` atomically with mode 0600 ([`super::replace`]:
/// a symbolic link is followed, anything but a regular file refused),
/// creating the directory with mode 0700 when needed.
///
/// # Errors
/// [`StateError::Io`] naming the path that failed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    create_private_dir(dir)?;
    super::replace::replace_file(path, bytes, ".state-")
        .map_err(|(path, source)| StateError::Io { path, source })
}

/// Creates `dir` and its missing parents with mode 0700.
///
/// # Errors
/// [`StateError::Io`] naming `dir`.
pub fn create_private_dir(dir: &Path) -> Result<(), StateError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;
    use crate::state::{spec_hash, ResourceState, Status};
    use serde_json::json;

    fn sample(store: &mut StateStore) {
        store
            .write(|s| {
                s.account_id = Some("123456789012".into());
                s.region = Some("us-east-1".into());
                s.resources.insert(
                    Address::new("stack.network").unwrap(),
                    ResourceState {
                        kind: "aws_cloudformation_stack".into(),
                        status: Status::Creating,
                        physical_id: None,
                        idempotency_token: Some("tok-1".into()),
                        spec: json!({"cidr": "10.0.0.0/16"}),
                        spec_hash: spec_hash(&json!({"cidr": "10.0.0.0/16"})),
                        outputs: Default::default(),
                        dependencies: vec![],
                        updating: None,
                        inputs_hash: None,
                        updated_at: chrono::Utc::now(),
                    },
                );
            })
            .unwrap();
    }

    #[test]
    fn round_trip_preserves_everything_and_bumps_the_serial() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = StateStore::open(dir.path(), "ml").unwrap();
        assert!(!store.exists());
        let lineage = store.state().lineage;
        sample(&mut store);
        sample(&mut store);
        assert_eq!(store.state().serial, 2);
        let again = StateStore::open(dir.path(), "ml").unwrap();
        assert_eq!(again.state(), store.state());
        assert_eq!(again.state().lineage, lineage);
    }

    #[cfg(unix)]
    #[test]
    fn state_file_is_0600_and_its_directory_0700() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mut store = StateStore::open(dir.path(), "ml").unwrap();
        sample(&mut store);
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(store.path()), 0o600);
        assert_eq!(mode(store.path().parent().unwrap()), 0o700);
        let leftovers: Vec<_> = fs::read_dir(store.path().parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn a_bare_file_name_is_written_in_the_current_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain.json");
        let cwd = std::env::current_dir().unwrap();
        // Relative path with an empty parent, as `kfaws plan -out tf.plan` passes it.
        std::env::set_current_dir(dir.path()).unwrap();
        let result = write_atomic(Path::new("plain.json"), b"{}");
        std::env::set_current_dir(cwd).unwrap();
        result.unwrap();
        assert_eq!(fs::read(file).unwrap(), b"{}");
    }

    #[cfg(unix)]
    #[test]
    fn the_first_write_keeps_the_state_as_opened_as_a_0600_backup() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mut store = StateStore::open(dir.path(), "ml").unwrap();
        sample(&mut store);
        assert!(
            !store.backup_path().exists(),
            "a new state has nothing to back up"
        );
        let serial_of = |p: &Path| decode(p, &fs::read(p).unwrap()).unwrap().serial;

        let mut store = StateStore::open(dir.path(), "ml").unwrap();
        let opened = fs::read(store.path()).unwrap();
        sample(&mut store);
        sample(&mut store);
        assert_eq!(fs::read(store.backup_path()).unwrap(), opened);
        assert_eq!(
            serial_of(&store.backup_path()),
            1,
            "not the intermediate write"
        );
        assert_eq!(serial_of(store.path()), 3);
        let mode = fs::metadata(store.backup_path())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);

        // The next command's first write replaces it with the state it opened.
        let mut store = StateStore::open(dir.path(), "ml").unwrap();
        sample(&mut store);
        assert_eq!(serial_of(&store.backup_path()), 3);
        assert_eq!(store.backup_path(), dir.path().join("ml").join(BACKUP_FILE));
    }

    #[test]
    fn newer_format_is_refused() {
        let err = decode(
            Path::new("s.json"),
            br#"{"format_version": 99, "serial": 1}"#,
        )
        .unwrap_err();
        assert!(
            matches!(err, StateError::NewerFormat { found: 99, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("upgrade kfaws"));
    }

    #[test]
    fn version_zero_and_garbage_are_malformed_with_a_reason() {
        let err = decode(Path::new("s.json"), br#"{"format_version": 0}"#).unwrap_err();
        assert!(err.to_string().contains("never existed"), "{err}");
        let err = decode(Path::new("s.json"), b"{\n  \"serial\": ").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        assert!(
            err.to_string()
                .contains("kept beside it as state.json.backup"),
            "the way back is named: {err}"
        );
        let err = decode(Path::new("s.json"), br#"{"serial": 1}"#).unwrap_err();
        assert!(err.to_string().contains("format_version"), "{err}");
    }

    #[test]
    fn unknown_status_is_malformed() {
        let doc = json!({
            "format_version": 1, "kfaws_version": "0", "serial": 1,
            "lineage": "6f1c2c5e-8b1e-4b5a-9a39-6c2a4b0c1d2e", "deployment": "ml",
            "resources": {"a": {"kind": "k", "status": "half-done", "spec": {},
                                "spec_hash": "", "updated_at": "2026-11-30T00:00:00Z"}}
        });
        let err = decode(Path::new("s.json"), doc.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("half-done"), "{err}");
    }

    #[test]
    fn a_state_of_another_deployment_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = StateStore::open(dir.path(), "ml").unwrap();
        sample(&mut store);
        fs::create_dir_all(dir.path().join("other")).unwrap();
        fs::copy(store.path(), dir.path().join("other/state.json")).unwrap();
        let err = StateStore::open(dir.path(), "other").unwrap_err();
        assert!(matches!(err, StateError::WrongDeployment { .. }), "{err}");
    }
}
