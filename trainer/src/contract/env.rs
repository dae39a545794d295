//! Topology from a launcher's environment variables.
//!
//! PyTorchJob (Kubeflow training operator v1) sets `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`
//! and `RANK` on every replica (one process per pod). Kubeflow Trainer v2 sets torchrun's
//! `PET_NNODES`, `PET_NODE_RANK`, `PET_MASTER_ADDR` and `PET_MASTER_PORT`; with one process
//! per node, rank = node rank and world size = number of nodes.
//!
//! The trainer is one process per pod. A PyTorchJob with an integer `nprocPerNode` other than
//! 1 is refused: the training operator then sets `PET_NPROC_PER_NODE` to it and `WORLD_SIZE` to
//! replicas × `nprocPerNode` (training-operator v1, `pkg/controller.v1/pytorch/envvar.go`), so
//! rank 0 would wait for ranks no pod runs. `auto`, `cpu` and `gpu` (torchrun's words, which
//! leave `WORLD_SIZE` the replica count) and no `PET_NPROC_PER_NODE` at all are accepted.

use super::{ConfigError, Launcher};

/// Rank, world size and where rank 0 is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// This process's rank.
    pub rank: usize,
    /// Number of processes.
    pub world_size: usize,
    /// Host of rank 0.
    pub master_addr: String,
    /// Port of rank 0, when the launcher gives one.
    pub master_port: Option<u16>,
}

const PYTORCHJOB: [&str; 4] = ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"];
const TRAINER_V2: [&str; 4] = [
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "PET_NNODES",
    "PET_NODE_RANK",
];

/// The topology of a PyTorchJob or Trainer v2 launch, `None` when neither set of variables is
/// present. PyTorchJob's variables win when both are.
///
/// # Errors
/// [`ConfigError::Contract`] when only some variables of a set are present, or one does not
/// parse (naming the variable), or a PyTorchJob's `PET_NPROC_PER_NODE` is an integer other
/// than 1 ([`check_nproc_per_node`]).
pub fn from_env(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(Topology, Launcher)>, ConfigError> {
    for (names, launcher) in [
        (PYTORCHJOB, Launcher::PyTorchJob),
        (TRAINER_V2, Launcher::TrainerV2),
    ] {
        let values: Vec<Option<String>> = names.iter().map(|n| env(n)).collect();
        if values.iter().all(Option::is_none) {
            continue;
        }
        let (set, missing): (Vec<_>, Vec<_>) =
            names.iter().zip(&values).partition(|(_, v)| v.is_some());
        let set: Vec<&str> = set.into_iter().map(|(n, _)| *n).collect();
        let missing: Vec<&str> = missing.into_iter().map(|(n, _)| *n).collect();
        if !missing.is_empty() {
            return Err(ConfigError::Contract {
                source_name: format!("{launcher:?} environment"),
                detail: format!(
                    "{} set but {} missing (all of {} are needed)",
                    set.join(", "),
                    missing.join(", "),
                    names.join(", ")
                ),
            });
        }
        let get = |i: usize| values[i].clone().expect("checked present");
        let number = |i: usize| {
            get(i)
                .trim()
                .parse::<usize>()
                .map_err(|_| ConfigError::Contract {
                    source_name: format!("{launcher:?} environment"),
                    detail: format!("{}={:?} is not a non-negative integer", names[i], get(i)),
                })
        };
        let port = get(1)
            .trim()
            .parse::<u16>()
            .map_err(|_| ConfigError::Contract {
                source_name: format!("{launcher:?} environment"),
                detail: format!("{}={:?} is not a port number", names[1], get(1)),
            })?;
        let topology = Topology {
            master_addr: get(0),
            master_port: Some(port),
            world_size: number(2)?,
            rank: number(3)?,
        };
        if launcher == Launcher::PyTorchJob {
            check_nproc_per_node(env("PET_NPROC_PER_NODE").as_deref(), topology.world_size)?;
        }
        return Ok(Some((topology, launcher)));
    }
    Ok(None)
}

/// Refuses a PyTorchJob's `PET_NPROC_PER_NODE` (its `nprocPerNode`) unless it is unset, empty,
/// `1`, or one of torchrun's words `auto`, `cpu`, `gpu`: a number other than 1 is what the
/// operator counted per pod in `world_size` (`WORLD_SIZE`) while the trainer runs one process
/// per pod, and anything else (`-1`, `2x`) is no value torchrun takes.
///
/// # Errors
/// [`ConfigError::Contract`] naming `PET_NPROC_PER_NODE`, `nprocPerNode` and `WORLD_SIZE`.
pub fn check_nproc_per_node(value: Option<&str>, world_size: usize) -> Result<(), ConfigError> {
    let Some(value) = value else { return Ok(()) };
    let word = value.trim();
    if word.is_empty() || matches!(word, "auto" | "cpu" | "gpu") || word.parse::<u64>() == Ok(1) {
        return Ok(());
    }
    let why = match word.parse::<u64>() {
        Ok(n) => format!(
            "the operator counts {n} processes per pod in WORLD_SIZE={world_size}, but \
             kfaws-trainer runs one process per pod, so rank 0 would wait for ranks that never \
             start"
        ),
        Err(_) => {
            "not a process count torchrun takes (a positive number, auto, cpu or gpu)".to_string()
        }
    };
    Err(ConfigError::Contract {
        source_name: format!("{:?} environment", Launcher::PyTorchJob),
        detail: format!(
            "PET_NPROC_PER_NODE={value:?} (the PyTorchJob's nprocPerNode): {why}; set \
             nprocPerNode to 1 or auto, or leave it out"
        ),
    })
}
