//! Data parallelism inside one process: each rank's batch is split across model replicas, each
//! computing forward and backward on its share as one task of the process's rayon pool, and
//! the replicas' gradients are combined before the all-reduce across ranks.
//!
//! Why: burn's CPU backend parallelises each operation across threads (intra-op parallelism),
//! which for this network's small convolutions scales poorly — measured on 2 cores, batch 64
//! on 2 threads: one replica 7,100–8,300 images/s, 2 replicas of 32 9,200–11,500 in one hour,
//! 8,800–9,800 against 13,500–16,000 in another (`kfaws-trainer-bench --replicas 1|2`;
//! `make bench` compares both with PyTorch). PyTorch calls
//! the two levels intra-op and inter-op parallelism (`torch.set_num_threads`,
//! `torch.set_num_interop_threads`).
//!
//! The result is the gradient of the mean loss over the whole batch, as with one replica: the
//! loss is a mean, so `∇ (1/n) Σᵢ ℓᵢ = Σₖ (nₖ/n) ∇ (1/nₖ) Σ_{i∈k} ℓᵢ` for shares of sizes `nₖ`.
//! Only the floating-point summation order differs.

use crate::contract::ConfigError;

/// Smallest share of a batch worth a replica of its own: below it a replica's fixed cost per
/// step (graph building, small-matrix kernels) outweighs the parallelism. Chosen by
/// measurement (`make bench`); a default, overridden by `--replicas`.
pub const MIN_IMAGES_PER_REPLICA: usize = 16;

/// How a process spends its threads: `threads` threads in rayon's pool, running `replicas`
/// model replicas as tasks (`replicas ≤ threads`); threads without a replica help the
/// replicas' operations through work stealing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parallelism {
    /// Threads this process may use in all (`--threads`).
    pub threads: usize,
    /// Model replicas the batch is split across (1: no split).
    pub replicas: usize,
}

impl Parallelism {
    /// `threads` threads (≥ 1) and `replicas` replicas, or — when `replicas` is `None` — one
    /// per thread but no more than one per [`MIN_IMAGES_PER_REPLICA`] images of `batch_size`.
    /// Replicas split the work of one device; on a GPU (`cpu == false`) there is one.
    ///
    /// # Errors
    /// [`ConfigError::Contract`] for 0 threads or more than
    /// [`kfaws_trainer_contract::MAX_THREADS`], 0 replicas, or more replicas than threads.
    pub fn resolve(
        threads: usize,
        replicas: Option<usize>,
        batch_size: usize,
        cpu: bool,
    ) -> Result<Self, ConfigError> {
        let bad = |detail: String| ConfigError::Contract {
            source_name: "--threads/--replicas (TRAINER_THREADS/TRAINER_REPLICAS; threads \
                          default to RAYON_NUM_THREADS, else the CPUs available)"
                .into(),
            detail,
        };
        if threads == 0 {
            return Err(bad("threads must be at least 1".into()));
        }
        if threads > kfaws_trainer_contract::MAX_THREADS {
            return Err(bad(format!(
                "{threads} threads: at most {} (far more threads than CPUs only thrash)",
                kfaws_trainer_contract::MAX_THREADS
            )));
        }
        let replicas = match replicas {
            Some(0) => return Err(bad("replicas must be at least 1".into())),
            Some(r) if r > threads => {
                return Err(bad(format!(
                    "{r} replicas need at least {r} threads, {threads} given"
                )))
            }
            Some(r) => r,
            None if !cpu => 1,
            None => threads.min(batch_size / MIN_IMAGES_PER_REPLICA).max(1),
        };
        Ok(Self { threads, replicas })
    }

    /// [`resolve`](Self::resolve) with `threads` defaulting to [`default_threads`] (`env` looks
    /// variables up): what `kfaws-trainer train` and the bench both use.
    ///
    /// # Errors
    /// As [`resolve`](Self::resolve).
    pub fn from_settings(
        threads: Option<usize>,
        replicas: Option<usize>,
        batch_size: usize,
        cpu: bool,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let threads = threads.unwrap_or_else(|| default_threads(env));
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        if threads > cpus {
            // Allowed (a pod's CPU limit can hide CPUs that exist), but each extra thread
            // time-shares a CPU: measured on 2 CPUs, 999 threads trained at 77 images/s
            // instead of about 10,000.
            tracing::warn!(
                threads,
                cpus,
                "more threads than CPUs available to this process: training will be slower"
            );
        }
        Self::resolve(threads, replicas, batch_size, cpu)
    }

    /// Sizes rayon's global pool — where the replicas run as tasks, and evaluation runs — to
    /// [`threads`](Self::threads).
    ///
    /// # Errors
    /// When the pool was already started (it is sized once per process) or threads cannot be
    /// spawned.
    pub fn build_global_pool(&self) -> Result<(), rayon::ThreadPoolBuildError> {
        rayon::ThreadPoolBuilder::new()
            .num_threads(self.threads)
            .build_global()
    }
}

/// Threads available to this process: `RAYON_NUM_THREADS` (looked up with `env`) when set to
/// a positive number, otherwise [`std::thread::available_parallelism`] (which honours cgroup
/// CPU quotas, so a pod's CPU limit; at most [`kfaws_trainer_contract::MAX_THREADS`]),
/// otherwise 1.
/// A value that is not a number is ignored with a warning (rayon ignores it too).
pub fn default_threads(env: &dyn Fn(&str) -> Option<String>) -> usize {
    let value = env("RAYON_NUM_THREADS");
    if let Some(value) = value.as_deref().filter(|v| v.parse::<usize>().is_err()) {
        tracing::warn!(
            RAYON_NUM_THREADS = %value,
            "not a thread count; ignored (as rayon ignores it): using the CPUs available"
        );
    }
    value
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .or_else(|| {
            // A default never exceeds the cap a value given is refused above.
            std::thread::available_parallelism()
                .ok()
                .map(|n| n.get().min(kfaws_trainer_contract::MAX_THREADS))
        })
        .unwrap_or(1)
}

/// Sizes of `replicas` contiguous shares of `n` examples, differing by at most one, larger
/// first; zero-sized shares when `n < replicas`.
pub fn split_sizes(n: usize, replicas: usize) -> Vec<usize> {
    let replicas = replicas.max(1);
    (0..replicas)
        .map(|k| n / replicas + usize::from(k < n % replicas))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_batch_and_differ_by_at_most_one() {
        for n in 0..40 {
            for r in 1..6 {
                let sizes = split_sizes(n, r);
                assert_eq!(sizes.len(), r);
                assert_eq!(sizes.iter().sum::<usize>(), n, "n={n} r={r}");
                let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(max - min <= 1, "n={n} r={r}: {sizes:?}");
                assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{sizes:?}");
            }
        }
        assert_eq!(split_sizes(64, 2), [32, 32]);
        assert_eq!(split_sizes(7, 3), [3, 2, 2]);
    }

    #[test]
    fn default_is_one_replica_per_thread_with_enough_images_each() {
        let auto = |threads, batch| Parallelism::resolve(threads, None, batch, true).unwrap();
        assert_eq!(auto(2, 64).replicas, 2);
        assert_eq!(auto(16, 64).replicas, 4);
        assert_eq!(auto(2, 8).replicas, 1);
        assert_eq!(auto(1, 64).replicas, 1);
        assert_eq!(
            Parallelism::resolve(8, None, 64, false).unwrap().replicas,
            1
        );
    }

    #[test]
    fn default_threads_follow_rayon_num_threads() {
        assert_eq!(default_threads(&|_| Some("3".into())), 3);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(default_threads(&|_| Some("0".into())), cores);
        assert_eq!(default_threads(&|_| None), cores);
    }

    #[test]
    fn explicit_replicas_are_checked_against_threads() {
        assert_eq!(
            Parallelism::resolve(4, Some(3), 64, true).unwrap(),
            Parallelism {
                threads: 4,
                replicas: 3
            }
        );
        for (threads, replicas, needle) in [
            (0, None, "threads must be at least 1"),
            (100_000, None, "100000 threads: at most 1024"),
            (2, Some(0), "replicas must be at least 1"),
            (2, Some(3), "3 replicas need at least 3 threads, 2 given"),
        ] {
            let err = Parallelism::resolve(threads, replicas, 64, true)
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{err}");
            assert!(err.contains("--replicas"), "{err}");
        }
    }
}
