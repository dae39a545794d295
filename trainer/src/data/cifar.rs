//! CIFAR-10's binary version (www.cs.toronto.edu/~kriz/cifar.html, "Binary version"):
//! files of records of 1 label byte followed by 3,072 pixel bytes, the 1,024 red values
//! first, then green, then blue, each row-major over 32×32.

use std::path::Path;

use super::{read_maybe_gz_sized, DataError, Split};

/// Bytes per record: 1 label + 3×32×32 pixels.
pub const CIFAR10_RECORD_BYTES: usize = 1 + 3 * 32 * 32;

const TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];
const TEST_FILE: &str = "test_batch.bin";

/// Loads the five training batches and the test batch from `dir`.
///
/// # Errors
/// [`DataError::MissingFile`] naming the absent batch, [`DataError::WrongSize`] when a file
/// (after gzip decompression, by its magic bytes) is not a whole number of 3,073-byte records
/// or its gzip stream is cut short or corrupt, [`DataError::BadLabel`] for a label above 9.
pub fn load_cifar10(dir: &Path) -> Result<super::Dataset, DataError> {
    let found = super::list_dir(dir)?;
    let mut train = Split {
        images: Vec::new(),
        labels: Vec::new(),
        shape: [3, 32, 32],
    };
    for name in TRAIN_FILES {
        read_batch(dir, name, &found, &mut train)?;
    }
    let mut test = Split {
        images: Vec::new(),
        labels: Vec::new(),
        shape: [3, 32, 32],
    };
    read_batch(dir, TEST_FILE, &found, &mut test)?;
    Ok(super::Dataset {
        kind: super::DatasetKind::Cifar10,
        train,
        test,
    })
}

fn read_batch(dir: &Path, name: &str, found: &[String], into: &mut Split) -> Result<(), DataError> {
    let path = dir.join(name);
    if !path.is_file() {
        return Err(DataError::MissingFile {
            path,
            dataset: "CIFAR-10 binary",
            found: super::found_list(found),
        });
    }
    // A batch file does not record its number of records: the rule is all there is to say.
    let expected = || {
        format!(
            "a non-zero multiple of {CIFAR10_RECORD_BYTES} (1 label + 3,072 pixel bytes \
             per record; 30,730,000 for an official batch of 10,000)"
        )
    };
    let bytes = read_maybe_gz_sized(&path, expected)?;
    if bytes.is_empty() || bytes.len() % CIFAR10_RECORD_BYTES != 0 {
        return Err(DataError::WrongSize {
            expected: expected(),
            found: bytes.len() as u64,
            path,
        });
    }
    for (index, record) in bytes.chunks_exact(CIFAR10_RECORD_BYTES).enumerate() {
        if record[0] >= 10 {
            return Err(DataError::BadLabel {
                path,
                index,
                label: i64::from(record[0]),
                classes: 10,
            });
        }
        into.labels.push(record[0]);
        into.images.extend_from_slice(&record[1..]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{load_dir, DatasetKind};

    /// Writes `records` synthetic records per file; the label of record i is i % 10 and its
    /// first red pixel is i.
    fn write_cifar(dir: &Path, records: usize) {
        for name in TRAIN_FILES.iter().chain([&TEST_FILE]) {
            let mut bytes = Vec::new();
            for i in 0..records {
                bytes.push((i % 10) as u8);
                let mut pixels = vec![0u8; 3072];
                pixels[0] = i as u8;
                pixels[1024] = 200; // first green pixel
                bytes.extend(pixels);
            }
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }

    #[test]
    fn reads_records_channel_major() {
        let dir = tempfile::tempdir().unwrap();
        write_cifar(dir.path(), 4);
        let ds = load_dir(dir.path(), None).unwrap();
        assert_eq!(ds.kind, DatasetKind::Cifar10);
        assert_eq!(ds.train.len(), 20);
        assert_eq!(ds.test.len(), 4);
        assert_eq!(&ds.train.labels[..4], &[0, 1, 2, 3]);
        let image = ds.train.image(3);
        assert_eq!(image.len(), 3072);
        assert_eq!((image[0], image[1024]), (3, 200));
    }

    #[test]
    fn a_dataset_hyperparameter_naming_another_dataset_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_cifar(dir.path(), 1);
        let err = load_dir(dir.path(), Some(DatasetKind::FashionMnist))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("says fashion-mnist") && err.contains("holds CIFAR-10 binary batches"),
            "{err}"
        );
        let ds = load_dir(dir.path(), Some(DatasetKind::Cifar10)).unwrap();
        assert_eq!(ds.kind, DatasetKind::Cifar10);
    }

    #[test]
    fn finds_the_official_archive_subdirectory() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("cifar-10-batches-bin");
        std::fs::create_dir(&sub).unwrap();
        write_cifar(&sub, 1);
        assert_eq!(load_dir(dir.path(), None).unwrap().train.len(), 5);
    }

    #[test]
    fn truncated_batch_names_file_and_record_size() {
        let dir = tempfile::tempdir().unwrap();
        write_cifar(dir.path(), 2);
        let path = dir.path().join("data_batch_3.bin");
        std::fs::write(&path, vec![0u8; CIFAR10_RECORD_BYTES + 100]).unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("data_batch_3.bin: 3173 bytes"), "{err}");
        assert!(err.contains("multiple of 3073"), "{err}");
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn a_gzip_batch_cut_short_is_a_wrong_size_with_the_record_size() {
        let dir = tempfile::tempdir().unwrap();
        write_cifar(dir.path(), 2);
        let path = dir.path().join("data_batch_2.bin");
        let whole = gz(&std::fs::read(&path).unwrap());
        std::fs::write(&path, &whole[..whole.len() / 2]).unwrap();
        let err = load_dir(dir.path(), None).unwrap_err();
        assert!(matches!(err, DataError::WrongSize { .. }), "{err:?}");
        let err = err.to_string();
        assert!(err.contains("data_batch_2.bin: "), "{err}");
        assert!(
            err.contains("expected a non-zero multiple of 3073"),
            "{err}"
        );
        assert!(err.contains("the gzip stream is cut short"), "{err}");
    }

    #[test]
    fn every_member_of_a_multi_member_gzip_batch_is_read() {
        let dir = tempfile::tempdir().unwrap();
        write_cifar(dir.path(), 4);
        let path = dir.path().join("data_batch_1.bin");
        let whole = std::fs::read(&path).unwrap();
        // `cat a.gz b.gz`, split within a record.
        let mut members = gz(&whole[..5000]);
        members.extend(gz(&whole[5000..]));
        std::fs::write(&path, members).unwrap();
        let ds = load_dir(dir.path(), None).unwrap();
        assert_eq!(ds.train.len(), 20);
        assert_eq!(&ds.train.labels[..4], &[0, 1, 2, 3]);
        assert_eq!(ds.train.image(3)[1024], 200);
    }

    #[test]
    fn misnamed_batch_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        write_cifar(dir.path(), 1);
        std::fs::rename(
            dir.path().join("test_batch.bin"),
            dir.path().join("test_batch"),
        )
        .unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("test_batch.bin is missing"), "{err}");
    }

    #[test]
    fn label_above_nine_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write_cifar(dir.path(), 1);
        let mut bytes = vec![0u8; CIFAR10_RECORD_BYTES];
        bytes[0] = 10;
        std::fs::write(dir.path().join("data_batch_5.bin"), bytes).unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(
            err.contains("data_batch_5.bin: label 10 of example 0"),
            "{err}"
        );
    }
}
