//! The state as shared by concurrent resource jobs, with group commit.
//!
//! Every transition must be durable before the job goes on (the executor's
//! crash guarantee), but one fsync per transition serialises all jobs
//! behind the disk. Group commit (as databases do it for their logs): a job
//! queues its change and a writer applies every queued change in one atomic
//! write; each job returns once the write that contains its change is on
//! disk. With N jobs finishing together that is one fsync, not N.

use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::state::store::StateStore;
use crate::state::State;

type Change = Box<dyn FnOnce(&mut State) + Send>;
type Ack = oneshot::Sender<Result<(), String>>;

struct Inner {
    store: Mutex<StateStore>,
    queue: Mutex<Vec<(Change, Ack)>>,
}

/// A cheaply cloned handle to the state store for concurrent jobs.
#[derive(Clone)]
pub struct SharedStore(Arc<Inner>);

/// A state write failed; the change it carried is not on disk.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct PersistError(pub String);

impl SharedStore {
    /// Wraps a store.
    pub fn new(store: StateStore) -> Self {
        Self(Arc::new(Inner {
            store: Mutex::new(store),
            queue: Mutex::new(Vec::new()),
        }))
    }

    /// Reads the current state.
    pub fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(self.0.store.lock().expect("not poisoned").state())
    }

    /// Applies `change` and returns once it is durably written, possibly
    /// together with changes of other jobs (group commit). The blocking
    /// write runs on tokio's blocking pool.
    ///
    /// # Errors
    /// [`PersistError`] with the I/O error when the write fails.
    pub async fn persist(
        &self,
        change: impl FnOnce(&mut State) + Send + 'static,
    ) -> Result<(), PersistError> {
        let (tx, rx) = oneshot::channel();
        self.0
            .queue
            .lock()
            .expect("not poisoned")
            .push((Box::new(change), tx));
        let inner = Arc::clone(&self.0);
        tokio::task::spawn_blocking(move || commit(&inner))
            .await
            .expect("the state writer does not panic");
        rx.await
            .expect("every queued change is answered")
            .map_err(PersistError)
    }
}

/// Writes whatever is queued; the first caller to take the store lock
/// commits everyone's changes, later callers find the queue empty.
fn commit(inner: &Inner) {
    let mut store = inner.store.lock().expect("not poisoned");
    let batch: Vec<_> = std::mem::take(&mut *inner.queue.lock().expect("not poisoned"));
    if batch.is_empty() {
        return;
    }
    let (changes, acks): (Vec<Change>, Vec<_>) = batch.into_iter().unzip();
    tracing::debug!(changes = changes.len(), "writing the state");
    let result = store
        .write(|s| {
            for change in changes {
                change(s);
            }
        })
        .map_err(|e| e.to_string());
    for ack in acks {
        let _ = ack.send(result.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_changes_are_all_durable_in_fewer_writes() {
        let dir = tempfile::tempdir().unwrap();
        let shared = SharedStore::new(StateStore::open(dir.path(), "ml").unwrap());
        let jobs: Vec<_> = (0..50)
            .map(|i| {
                let s = shared.clone();
                tokio::spawn(async move {
                    s.persist(move |st| {
                        st.account_id = Some(format!(
                            "{}{i}",
                            st.account_id.clone().unwrap_or_default().len()
                        ));
                        st.deployment = "ml".into();
                    })
                    .await
                    .unwrap();
                })
            })
            .collect();
        for j in jobs {
            j.await.unwrap();
        }
        let serial = shared.read(|s| s.serial);
        assert!((1..=50).contains(&serial), "{serial}");
        let on_disk = StateStore::open(dir.path(), "ml").unwrap();
        assert_eq!(
            on_disk.state().serial,
            serial,
            "what was acknowledged is on disk"
        );
    }

    #[tokio::test]
    async fn a_failed_write_is_reported_to_the_waiting_job() {
        let dir = tempfile::tempdir().unwrap();
        let shared = SharedStore::new(StateStore::open(&dir.path().join("sub"), "ml").unwrap());
        // A file where the state directory should be makes the write fail.
        std::fs::write(dir.path().join("sub"), b"not a directory").unwrap();
        let err = shared.persist(|s| s.serial += 0).await.unwrap_err();
        assert!(!err.0.is_empty());
        assert_eq!(
            shared.read(|s| s.serial),
            0,
            "the failed change is not applied"
        );
    }
}
