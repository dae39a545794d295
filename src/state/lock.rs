//! The state lock: at most one writing command per deployment at a time.
//!
//! The lock is a file, `state.lock`, created atomically with its content
//! (written to a temporary file, then hard-linked into place) and holding who took it: a random id, the operation,
//! user, host, pid and time. A second command fails at once with that
//! information. A lock whose process died stays until `kfaws state unlock
//! ID` removes it -- the holder may have been killed in the middle of a
//! write to AWS, and only a person can tell that it is safe (Terraform's
//! `force-unlock` rule). A lock whose process still runs on this host is
//! not removed without `--force`: unlocking it would let a second command
//! write the state beside the first.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::store::{create_private_dir, deployment_dir};

/// Who holds a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    /// The id `kfaws state unlock` asks for.
    pub id: Uuid,
    /// The command holding it: `apply`, `destroy`, ...
    pub operation: String,
    /// `user@host`.
    pub who: String,
    /// Host name of the holder.
    pub host: String,
    /// Process id of the holder.
    pub pid: u32,
    /// When it was taken.
    pub created: DateTime<Utc>,
    /// kfaws version of the holder.
    pub version: String,
}

/// Why a lock could not be taken or broken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Someone else holds the lock.
    #[error(
        "the state is locked by {} (pid {}{}) for `{}` since {}; lock ID {}\n\
         If no kfaws process holds it any more, remove it with `kfaws state unlock {}`",
        .0.who, .0.pid, liveness(.0), .0.operation, .0.created.to_rfc3339(), .0.id, .0.id
    )]
    Held(Box<LockInfo>),
    /// The lock file exists but cannot be read (being written, or damaged).
    #[error(
        "the state lock {path} exists but cannot be read ({message}); if no kfaws command is \
         running for this deployment, delete that file"
    )]
    Unreadable {
        /// The lock file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// `state unlock` of a lock whose process still runs on this host.
    #[error(
        "the lock {} is held by pid {} on this host, which is still running `{}` (since {}); \
         removing it would let another command write the state beside it. Wait for it to end, or \
         stop it (Ctrl-C lets it record what it did); pass --force only if that process is not \
         kfaws",
        .0.id, .0.pid, .0.operation, .0.created.to_rfc3339()
    )]
    Alive(Box<LockInfo>),
    /// `state unlock` was given an id that does not match.
    #[error("lock ID {given} does not match the current lock {}", .current.id)]
    WrongId {
        /// The id given.
        given: String,
        /// The current lock.
        current: Box<LockInfo>,
    },
    /// `state unlock` found no lock.
    #[error("the state of this deployment is not locked")]
    NotLocked,
    /// The deployment's state directory cannot be made.
    #[error("cannot create the state directory {dir}: {source}; the state directory is --state-dir, else state_dir in kfaws.toml, else .kfaws beside kfaws.toml: point it at a writable directory")]
    StateDir {
        /// The deployment's directory in the state directory.
        dir: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// An I/O error.
    #[error("state lock {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn liveness(info: &LockInfo) -> &'static str {
    match running_here(info) {
        Some(false) => ", which is no longer running",
        _ => "",
    }
}

/// Whether the holder runs: `Some` only for a lock taken on this host,
/// where its pid can be looked up (`/proc/<pid>/stat` on Linux); `None`
/// elsewhere. A process that exited but that its parent has not reaped yet
/// (a zombie, state `Z`, or `X` while it goes: proc(5), `/proc/pid/stat`
/// field 3) does not run: a kfaws killed under a parent that never waits
/// for it leaves one. A reused pid reads as running (hence `--force`).
fn running_here(info: &LockInfo) -> Option<bool> {
    if info.host != host() || !cfg!(target_os = "linux") {
        return None;
    }
    let Ok(stat) = fs::read_to_string(format!("/proc/{}/stat", info.pid)) else {
        return Some(false);
    };
    // `pid (comm) state …`: comm may hold spaces and parentheses.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    Some(!matches!(state, Some('Z' | 'X' | 'x')))
}

/// `uid N` of this process, for a `who` when no user name is in the environment.
fn current_uid() -> String {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let Ok(m) = fs::metadata("/proc/self") {
            return format!("uid {}", m.uid());
        }
    }
    "unknown user".into()
}

fn host() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

fn lock_path(state_dir: &Path, deployment: &str) -> PathBuf {
    deployment_dir(state_dir, deployment).join("state.lock")
}

/// Locks this process holds, so an immediate exit (a second Ctrl-C) can
/// release them: `Drop` does not run on `process::exit`.
static HELD: Mutex<Vec<(PathBuf, Uuid)>> = Mutex::new(Vec::new());

/// Releases every lock this process holds. For the exit path of a second
/// interrupt, where destructors do not run.
pub fn release_held() {
    let held = std::mem::take(&mut *HELD.lock().unwrap_or_else(|e| e.into_inner()));
    for (path, id) in held {
        if matches!(read(&path), Ok(Some(current)) if current.id == id) {
            let _ = fs::remove_file(&path);
        }
    }
}

/// A held lock; released when dropped.
#[derive(Debug)]
pub struct StateLock {
    path: PathBuf,
    info: LockInfo,
    /// The directories `acquire` created, deepest first: removed again on
    /// release while empty, so a command that fails before writing any
    /// state leaves nothing behind.
    created: Vec<PathBuf>,
}

impl StateLock {
    /// Takes the lock of `deployment` for `operation`, failing at once if it is held.
    ///
    /// # Errors
    /// [`LockError::Held`] with the holder, [`LockError::Unreadable`],
    /// [`LockError::StateDir`] when the directory cannot be made, [`LockError::Io`].
    pub fn acquire(state_dir: &Path, deployment: &str, operation: &str) -> Result<Self, LockError> {
        let path = lock_path(state_dir, deployment);
        let dir = path.parent().expect("lock path has a parent");
        let created: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(Path::to_path_buf)
            .collect();
        create_private_dir(dir).map_err(|e| match e {
            crate::state::store::StateError::Io { source, .. } => LockError::StateDir {
                dir: dir.to_path_buf(),
                source,
            },
            other => LockError::StateDir {
                dir: dir.to_path_buf(),
                source: std::io::Error::other(other.to_string()),
            },
        })?;
        let host = host();
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| current_uid());
        let info = LockInfo {
            id: Uuid::new_v4(),
            operation: operation.to_string(),
            who: format!("{user}@{host}"),
            host,
            pid: std::process::id(),
            created: Utc::now(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        };
        // Write the holder's details to a private temporary file first and
        // hard-link it into place: link(2) fails if the name exists, and the
        // lock file is never visible half-written (the classic link-based
        // lock, safe on NFS too).
        let mut tmp = tempfile::Builder::new()
            .prefix(".lock-")
            .tempfile_in(dir)
            .map_err(|source| LockError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        let bytes = serde_json::to_vec_pretty(&info).expect("lock info serializes");
        tmp.write_all(&bytes)
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(|source| LockError::Io {
                path: tmp.path().to_path_buf(),
                source,
            })?;
        match fs::hard_link(tmp.path(), &path) {
            Ok(()) => {
                HELD.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((path.clone(), info.id));
                Ok(Self {
                    path,
                    info,
                    created,
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(match read(&path)? {
                Some(held) => LockError::Held(Box::new(held)),
                None => LockError::Unreadable {
                    path,
                    message: "it was released while being read; run the command again".into(),
                },
            }),
            Err(source) => Err(LockError::Io { path, source }),
        }
    }

    /// Who holds this lock (us).
    pub fn info(&self) -> &LockInfo {
        &self.info
    }
}

impl Drop for StateLock {
    fn drop(&mut self) {
        HELD.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(_, id)| *id != self.info.id);
        // Only remove the file if it is still ours: `state unlock` may have
        // broken it and another command taken it since.
        if matches!(read(&self.path), Ok(Some(current)) if current.id == self.info.id) {
            let _ = fs::remove_file(&self.path);
        }
        // remove_dir(2) removes only empty directories: one that holds a
        // state file (or another command's lock) stays.
        for dir in &self.created {
            if fs::remove_dir(dir).is_err() {
                break;
            }
        }
    }
}

fn read(path: &Path) -> Result<Option<LockInfo>, LockError> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| LockError::Unreadable {
                path: path.to_path_buf(),
                message: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(LockError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The current lock of `deployment`, if any.
///
/// # Errors
/// [`LockError::Unreadable`] or [`LockError::Io`].
pub fn current(state_dir: &Path, deployment: &str) -> Result<Option<LockInfo>, LockError> {
    read(&lock_path(state_dir, deployment))
}

/// Breaks the lock whose id is `id` (`kfaws state unlock ID`); a lock whose
/// process still runs on this host only with `force`. An unreadable lock
/// file can be broken with the id `unreadable`.
///
/// # Errors
/// [`LockError::NotLocked`], [`LockError::WrongId`], [`LockError::Alive`],
/// [`LockError::Io`].
pub fn force_unlock(
    state_dir: &Path,
    deployment: &str,
    id: &str,
    force: bool,
) -> Result<LockInfo, LockError> {
    let path = lock_path(state_dir, deployment);
    let current = read(&path)?.ok_or(LockError::NotLocked)?;
    if current.id.to_string() != id {
        return Err(LockError::WrongId {
            given: id.to_string(),
            current: Box::new(current),
        });
    }
    if !force && running_here(&current) == Some(true) {
        return Err(LockError::Alive(Box::new(current)));
    }
    fs::remove_file(&path).map_err(|source| LockError::Io { path, source })?;
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `release_held` releases every lock this process holds, including
    /// those of tests running beside it: tests that take locks run one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn a_state_directory_that_cannot_be_made_says_where_it_is_set() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let err = StateLock::acquire(&file.join("state"), "demo", "plan").unwrap_err();
        assert!(matches!(err, LockError::StateDir { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.starts_with("cannot create the state directory ")
                && text.contains("--state-dir, else state_dir in kfaws.toml"),
            "{text}"
        );
    }

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    #[test]
    fn second_acquire_fails_naming_the_holder_and_release_frees_it() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let held = StateLock::acquire(dir.path(), "ml", "apply").unwrap();
        let err = StateLock::acquire(dir.path(), "ml", "destroy").unwrap_err();
        let LockError::Held(info) = &err else {
            panic!("{err}")
        };
        assert_eq!(**info, *held.info());
        let msg = err.to_string();
        assert!(
            msg.contains("`apply`") && msg.contains(&held.info().id.to_string()),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        drop(held);
        StateLock::acquire(dir.path(), "ml", "destroy").unwrap();
    }

    #[test]
    fn releasing_removes_the_directories_acquire_made_while_empty() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let state_dir = dir.path().join(".kfaws");
        drop(StateLock::acquire(&state_dir, "ml", "plan").unwrap());
        assert!(!state_dir.exists(), "a failed first plan leaves nothing");

        let lock = StateLock::acquire(&state_dir, "ml", "apply").unwrap();
        let state = deployment_dir(&state_dir, "ml").join("state.json");
        fs::write(&state, b"{}").unwrap();
        drop(lock);
        assert!(state.exists(), "a directory holding state stays");
    }

    #[test]
    fn release_held_removes_this_process_locks_only() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let ours = StateLock::acquire(dir.path(), "held", "apply").unwrap();
        release_held();
        assert!(current(dir.path(), "held").unwrap().is_none());
        std::mem::forget(ours);
    }

    #[test]
    fn locks_are_per_deployment() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let _a = StateLock::acquire(dir.path(), "a", "apply").unwrap();
        let _b = StateLock::acquire(dir.path(), "b", "apply").unwrap();
    }

    #[test]
    fn unlock_needs_the_matching_id_and_leaves_a_newer_lock_alone() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let stale = StateLock::acquire(dir.path(), "ml", "apply").unwrap();
        let id = stale.info().id.to_string();
        assert!(matches!(
            force_unlock(dir.path(), "ml", "not-the-id", true),
            Err(LockError::WrongId { .. })
        ));
        // Its holder (this test's process) runs: refused without --force.
        let err = force_unlock(dir.path(), "ml", &id, false).unwrap_err();
        assert!(matches!(err, LockError::Alive(_)), "{err}");
        assert!(err.to_string().contains("still running `apply`"), "{err}");
        assert!(current(dir.path(), "ml").unwrap().is_some(), "kept");
        assert_eq!(
            force_unlock(dir.path(), "ml", &id, true).unwrap().id,
            stale.info().id
        );
        let newer = StateLock::acquire(dir.path(), "ml", "apply").unwrap();
        drop(stale);
        assert_eq!(
            current(dir.path(), "ml").unwrap().unwrap().id,
            newer.info().id
        );
        drop(newer);
        assert!(matches!(
            force_unlock(dir.path(), "ml", &id, true),
            Err(LockError::NotLocked)
        ));
    }

    /// The lock of deployment `ml` in `dir` as a process `pid` of this host left it (taken,
    /// never released); its info.
    fn left_by(dir: &Path, pid: u32) -> LockInfo {
        let lock = StateLock::acquire(dir, "ml", "apply").unwrap();
        let mut info = lock.info().clone();
        std::mem::forget(lock);
        info.pid = pid;
        fs::write(lock_path(dir, "ml"), serde_json::to_vec(&info).unwrap()).unwrap();
        info
    }

    /// A holder killed under a parent that has not waited for it yet
    /// (a zombie) is no longer running: its lock can be unlocked by id.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_lock_left_by_a_killed_process_not_yet_reaped_can_be_unlocked() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap();
        let info = left_by(dir.path(), child.id());
        let alive = StateLock::acquire(dir.path(), "ml", "apply").unwrap_err();
        assert!(!alive.to_string().contains("no longer running"), "{alive}");
        child.kill().unwrap();
        // Not reaped: the pid stays a zombie until `wait`.
        let stat = format!("/proc/{}/stat", child.id());
        let zombie = |s: String| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        };
        for _ in 0..200 {
            if fs::read_to_string(&stat).is_ok_and(zombie) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(fs::read_to_string(&stat).is_ok_and(zombie), "a zombie");
        let err = StateLock::acquire(dir.path(), "ml", "apply").unwrap_err();
        assert!(err.to_string().contains("no longer running"), "{err}");
        let unlocked = force_unlock(dir.path(), "ml", &info.id.to_string(), false);
        child.wait().unwrap();
        assert_eq!(unlocked.unwrap().id, info.id);
    }

    #[test]
    fn a_lock_left_by_a_dead_process_says_so() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        left_by(dir.path(), u32::MAX - 1);
        let err = StateLock::acquire(dir.path(), "ml", "apply").unwrap_err();
        if cfg!(target_os = "linux") {
            assert!(err.to_string().contains("no longer running"), "{err}");
        }
    }
}
