//! The rules every `--resume-from` applies, whichever runtime ran the job it continues (a
//! SageMaker training job, [`crate::sagemaker::resume`]; a PyTorchJob,
//! [`super::pytorchjob::resume`]): the new job reads the same data in the same order, or the
//! checkpoint's (epoch, step) would name other examples ([`JobRecord::resume_mismatches`], the
//! rule a local `--resume` applies), and it takes the old job's settings for those its command
//! leaves out ([`JobRecord::resumed_with`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::local::JobRecord;

/// A job's settings as a local job's record holds them, less the data, which a job that did
/// not run here has as a source (an S3 URI, an EFS path) compared apart.
fn record(workers: u32, hyperparameters: &BTreeMap<String, String>) -> JobRecord {
    JobRecord {
        workers,
        data_dir: PathBuf::new(),
        hyperparameters: hyperparameters.clone(),
        data: None,
    }
}

/// Every hyperparameter that fixes each epoch's shards (`batch-size`, `seed`,
/// `max-train-samples`, `dataset`) set to another value by the new job (`now`) than by job
/// `old` (`was`), as one problem each, naming both values and the flag that sets it. The world
/// size and the data are not compared here: the caller tells them, each with its own remedy.
pub fn shard_problems(
    old: &str,
    was: &BTreeMap<String, String>,
    now: &BTreeMap<String, String>,
) -> Vec<String> {
    record(0, was)
        .resume_mismatches(&record(0, now))
        .into_iter()
        .map(|(setting, recorded, asked)| {
            let flag = match setting.as_str() {
                "batch-size" => "--batch-size".to_string(),
                other => format!("--hp {other}"),
            };
            format!(
                "--resume-from {old}: it ran with {setting} {recorded}, this job asks for \
                 {asked}: the checkpoint's position in the data holds only for the same \
                 {setting} ({flag})"
            )
        })
        .collect()
}

/// The world size and hyperparameters a job resuming one that ran `previous` (world size,
/// hyperparameters) runs with: those `requested` that `given` names (`workers` for
/// `--workers`, a hyperparameter key for its flag or `--hp`), `previous`'s for the rest, as a
/// local `--resume` takes its record's ([`JobRecord::resumed_with`]). Pure.
pub fn settings(
    previous: (u32, &BTreeMap<String, String>),
    requested: (u32, &BTreeMap<String, String>),
    given: &BTreeSet<String>,
) -> (u32, BTreeMap<String, String>) {
    let merged =
        record(previous.0, previous.1).resumed_with(&record(requested.0, requested.1), given);
    (merged.workers, merged.hyperparameters)
}

/// The hyperparameters `now` sets to other values than `was` (e.g. `epochs`, `lr`), as
/// `(name, was, now)` ([`JobRecord::changed`]), less a `dataset` named on one side only (the
/// same data: the same dataset).
pub fn changed(
    was: &BTreeMap<String, String>,
    now: &BTreeMap<String, String>,
) -> Vec<(String, String, String)> {
    record(0, was)
        .changed(&record(0, now))
        .into_iter()
        // Unset on one side, the trainer detects the same dataset from the same files.
        .filter(|(k, was, now)| !(k == "dataset" && (was == "default" || now == "default")))
        .collect()
}

/// `changed` as the line after a resumed job's creation shows it: `; changed: epochs 2 -> 4,
/// lr 0.02 -> 0.01`, or nothing.
pub fn describe_changed(changed: &[(String, String, String)]) -> String {
    match changed.is_empty() {
        true => String::new(),
        false => format!(
            "; changed: {}",
            changed
                .iter()
                .map(|(k, was, now)| format!("{k} {was} -> {now}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The `epochs` the trainer reads from `hyperparameters` (its default when unset). Values it
/// would refuse are ignored here: they are reported on their own.
pub fn epochs(hyperparameters: &BTreeMap<String, String>) -> u64 {
    let mut parsed = kfaws_trainer_contract::Hyperparameters::default();
    for (k, v) in hyperparameters {
        let _ = parsed.set(k, v, "--hp");
    }
    parsed.epochs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_shard_setting_changed_is_a_problem_and_epochs_or_lr_are_not() {
        let was = hp(&[("batch-size", "32"), ("epochs", "2"), ("lr", "0.02")]);
        let now = hp(&[
            ("batch-size", "64"),
            ("epochs", "4"),
            ("lr", "0.01"),
            ("seed", "7"),
        ]);
        let problems = shard_problems("old", &was, &now);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0]
                .starts_with("--resume-from old: it ran with batch-size 32, this job asks for 64")
                && problems[0].ends_with("(--batch-size)"),
            "{problems:?}"
        );
        assert!(
            problems[1].contains("seed 1, this job asks for 7")
                && problems[1].ends_with("(--hp seed)"),
            "{problems:?}"
        );
        assert!(
            shard_problems("old", &was, &hp(&[("batch_size", "32"), ("epochs", "9")])).is_empty()
        );
        let changed = changed(&was, &now);
        assert_eq!(
            describe_changed(&changed),
            "; changed: batch-size 32 -> 64, epochs 2 -> 4, lr 0.02 -> 0.01, seed default -> 7"
        );
        assert_eq!(describe_changed(&[]), "");
    }

    #[test]
    fn settings_left_out_are_the_previous_jobs() {
        let was = hp(&[("epochs", "2"), ("lr", "0.05"), ("seed", "3")]);
        let asked = hp(&[("epochs", "4"), ("lr", "0.02")]);
        let given: BTreeSet<String> = ["epochs".to_string()].into();
        let (workers, merged) = settings((3, &was), (2, &asked), &given);
        assert_eq!(workers, 3);
        assert_eq!(
            merged,
            hp(&[("epochs", "4"), ("lr", "0.05"), ("seed", "3")])
        );
        let given: BTreeSet<String> = ["workers".to_string()].into();
        assert_eq!(settings((3, &was), (2, &asked), &given).0, 2);
    }

    #[test]
    fn epochs_are_read_as_the_trainer_reads_them() {
        assert_eq!(epochs(&hp(&[("epochs", "7")])), 7);
        assert_eq!(
            epochs(&hp(&[("lr", "0.1")])),
            kfaws_trainer_contract::Hyperparameters::default().epochs
        );
    }
}
