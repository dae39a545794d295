//! Checkpoint file names, shared by the trainer (which writes them) and kfaws (which reads
//! them in a SageMaker job's checkpoint prefix before resuming it).
//!
//! A checkpoint taken before step `step` (0-based, of the epoch's batches) of epoch `epoch`
//! (1-based) is `checkpoint-EEEEEE-SSSSSSSS.bin`: zero-padded, so names sort by epoch, then
//! step, and the last name is the newest. A resumed run starts at that epoch and step; one
//! taken after the last step of epoch `e` is `(e + 1, 0)`.

/// The file name of the checkpoint taken before step `step` of epoch `epoch`.
pub fn file_name(epoch: u64, step: u64) -> String {
    format!("checkpoint-{epoch:06}-{step:08}.bin")
}

/// `(epoch, step)` of a checkpoint file name written by [`file_name`], or `None` for any
/// other name.
pub fn parse_file_name(name: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix("checkpoint-")?.strip_suffix(".bin")?;
    let (epoch, step) = rest.split_once('-')?;
    let number = |s: &str| -> Option<u64> {
        match !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            true => s.parse().ok(),
            false => None,
        }
    };
    Some((number(epoch)?, number(step)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort_by_epoch_then_step() {
        assert_eq!(file_name(3, 895), "checkpoint-000003-00000895.bin");
        assert_eq!(parse_file_name(&file_name(3, 895)), Some((3, 895)));
        let mut names = vec![file_name(10, 0), file_name(2, 5), file_name(2, 40)];
        names.sort();
        assert_eq!(names, [file_name(2, 5), file_name(2, 40), file_name(10, 0)]);
        for other in [
            ".checkpoint-000001-00000001.bin.tmp",
            "checkpoint-1.bin",
            "checkpoint--1.bin",
            "model.bin",
        ] {
            assert_eq!(parse_file_name(other), None, "{other}");
        }
    }
}
