//! CIFAR-10's python version (www.cs.toronto.edu/~kriz/cifar.html, "CIFAR-10 python version",
//! archive `cifar-10-python.tar.gz`), read without Python.
//!
//! Each batch file (`data_batch_1` … `data_batch_5`, `test_batch`, no extension) is a pickled
//! dict: `b"labels"`, a list of 10,000 ints in `0..10`, and `b"data"`, a numpy `uint8` array of
//! shape 10,000×3,072 whose rows are images in the same channel-major order as the binary
//! version (1,024 red values, then green, then blue, each row-major over 32×32).
//!
//! The pickle is decoded by `serde-pickle`. numpy pickles an array (protocols 2–4) as
//! `numpy.core.multiarray._reconstruct(ndarray, (0,), b'b')` followed by BUILD with the state
//! tuple `(version, shape, dtype, is_fortran, raw_bytes)` (numpy's `ndarray.__reduce__` and
//! `__setstate__`); serde-pickle leaves numpy's globals unresolved and keeps the BUILD state,
//! so the array arrives as that tuple. Protocol 5's out-of-band `_frombuffer` form is not read
//! (the official archive is protocol 2).

use std::collections::BTreeMap;
use std::path::Path;

use serde_pickle::{DeOptions, HashableValue, Value};

use super::{read_maybe_gz, DataError, Split};

/// The training batches of the official archive, in order.
pub const PYTHON_TRAIN_FILES: [&str; 5] = [
    "data_batch_1",
    "data_batch_2",
    "data_batch_3",
    "data_batch_4",
    "data_batch_5",
];
/// The test batch of the official archive.
pub const PYTHON_TEST_FILE: &str = "test_batch";

/// Pixels per image: 3 channels × 32 × 32.
const IMAGE_BYTES: usize = 3 * 32 * 32;

/// Loads the five training batches and the test batch of CIFAR-10's python version from `dir`.
///
/// # Errors
/// [`DataError::MissingFile`] naming an absent batch; [`DataError::Pickle`] naming the file when
/// it is not a pickle or not a dict with `labels` (ints in `0..10`) and `data` (a one-byte
/// numpy array of N×3,072 with N = the number of labels); [`DataError::BadLabel`] for a label
/// outside `0..10`, naming it as written (negative ones included).
pub fn load_cifar10_python(dir: &Path) -> Result<super::Dataset, DataError> {
    let found = super::list_dir(dir)?;
    let mut train = empty_split();
    for name in PYTHON_TRAIN_FILES {
        read_batch(dir, name, &found, &mut train)?;
    }
    let mut test = empty_split();
    read_batch(dir, PYTHON_TEST_FILE, &found, &mut test)?;
    Ok(super::Dataset {
        kind: super::DatasetKind::Cifar10,
        train,
        test,
    })
}

fn empty_split() -> Split {
    Split {
        images: Vec::new(),
        labels: Vec::new(),
        shape: [3, 32, 32],
    }
}

fn read_batch(dir: &Path, name: &str, found: &[String], into: &mut Split) -> Result<(), DataError> {
    let path = dir.join(name);
    if !path.is_file() {
        return Err(DataError::MissingFile {
            path,
            dataset: "CIFAR-10 python",
            found: super::found_list(found),
        });
    }
    let bytes = read_maybe_gz(&path)?;
    let fail = |reason: String| DataError::Pickle {
        path: path.clone(),
        reason,
    };
    let value =
        serde_pickle::value_from_slice(&bytes, DeOptions::new().replace_unresolved_globals())
            .map_err(|e| fail(format!("not a readable pickle ({e})")))?;
    let Value::Dict(dict) = value else {
        return Err(fail(format!(
            "expected a dict with labels and data, found {}",
            kind(&value)
        )));
    };
    let labels = labels(&dict).map_err(&fail)?;
    let pixels = pixels(&dict, labels.len()).map_err(&fail)?;
    let mut classes = Vec::with_capacity(labels.len());
    for (index, &label) in labels.iter().enumerate() {
        match u8::try_from(label) {
            Ok(class) if class < 10 => classes.push(class),
            _ => {
                return Err(DataError::BadLabel {
                    path,
                    index,
                    label,
                    classes: 10,
                })
            }
        }
    }
    into.labels.extend_from_slice(&classes);
    into.images.extend_from_slice(pixels);
    Ok(())
}

/// The entry `key`, whether the pickle spells keys as bytes (Python 2, or Python 3 loading with
/// `encoding="bytes"`) or as str.
fn entry<'a>(dict: &'a BTreeMap<HashableValue, Value>, key: &str) -> Result<&'a Value, String> {
    dict.get(&HashableValue::Bytes(key.as_bytes().to_vec()))
        .or_else(|| dict.get(&HashableValue::String(key.to_owned())))
        .ok_or_else(|| {
            let keys: Vec<String> = dict
                .keys()
                .map(|k| match k {
                    HashableValue::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
                    HashableValue::String(s) => s.clone(),
                    other => format!("{other:?}"),
                })
                .collect();
            format!("no \"{key}\" entry (keys: {})", keys.join(", "))
        })
}

/// `labels`: a list of ints, as written (the range is checked by the caller).
fn labels(dict: &BTreeMap<HashableValue, Value>) -> Result<Vec<i64>, String> {
    let Value::List(items) = entry(dict, "labels")? else {
        return Err("\"labels\" is not a list".into());
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::I64(v) => Ok(*v),
            other => Err(format!("label {i} is {}, not an int", kind(other))),
        })
        .collect()
}

/// `data`: numpy's BUILD state `(version, shape, dtype, is_fortran, raw)` with shape
/// `(n, 3072)`, C order and one byte per element.
fn pixels(dict: &BTreeMap<HashableValue, Value>, n: usize) -> Result<&[u8], String> {
    let data = entry(dict, "data")?;
    let not_array = || {
        format!(
            "\"data\" is {}, not a numpy array pickled with protocol 2-4 (re-pickle it with \
             protocol 4, or use the official cifar-10-python.tar.gz)",
            kind(data)
        )
    };
    let Value::Tuple(state) = data else {
        return Err(not_array());
    };
    let [_version, Value::Tuple(shape), _dtype, Value::Bool(fortran), Value::Bytes(raw)] =
        state.as_slice()
    else {
        return Err(not_array());
    };
    let shape: Vec<i64> = shape
        .iter()
        .map(|d| match d {
            Value::I64(v) => Ok(*v),
            _ => Err(not_array()),
        })
        .collect::<Result<_, _>>()?;
    if shape != [n as i64, IMAGE_BYTES as i64] {
        return Err(format!(
            "\"data\" has shape {shape:?}, expected [{n}, {IMAGE_BYTES}] ({n} labels, 3×32×32 \
             pixels each)"
        ));
    }
    if *fortran {
        return Err("\"data\" is in Fortran order, expected C order".into());
    }
    if raw.len() != n * IMAGE_BYTES {
        return Err(format!(
            "\"data\" holds {} bytes for {n}×{IMAGE_BYTES} elements: not a uint8 array",
            raw.len()
        ));
    }
    Ok(raw)
}

/// A short name of a pickled value's type, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::None => "None (an object this reader does not know)",
        Value::Bool(_) => "a bool",
        Value::I64(_) | Value::Int(_) => "an int",
        Value::F64(_) => "a float",
        Value::Bytes(_) => "bytes",
        Value::String(_) => "a str",
        Value::List(_) => "a list",
        Value::Tuple(_) => "a tuple",
        Value::Set(_) | Value::FrozenSet(_) => "a set",
        Value::Dict(_) => "a dict",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{load_dir, DatasetKind};
    use std::path::PathBuf;

    /// Batches written by Python 3 with numpy (`tests/data/cifar10-python/generate.py`): 3
    /// images labelled 3, 8, 0; pixel j of image i is (7i + j) mod 256.
    fn fixture(protocol: u8) -> Vec<u8> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
            "tests/data/cifar10-python/batch-protocol{protocol}.pickle"
        ));
        std::fs::read(path).unwrap()
    }

    fn write_all(dir: &Path, batch: &[u8]) {
        for name in PYTHON_TRAIN_FILES.iter().chain([&PYTHON_TEST_FILE]) {
            std::fs::write(dir.join(name), batch).unwrap();
        }
    }

    fn assert_fixture_contents(split: &Split, copies: usize) {
        assert_eq!(split.len(), 3 * copies);
        assert_eq!(&split.labels[..3], &[3, 8, 0]);
        for i in 0..3 {
            let image = split.image(i);
            assert_eq!(image.len(), IMAGE_BYTES);
            for j in [0, 1, 1023, 1024, 2048, 3071] {
                assert_eq!(
                    usize::from(image[j]),
                    (7 * i + j) % 256,
                    "image {i} pixel {j}"
                );
            }
        }
    }

    #[test]
    fn reads_numpy_pickles_of_protocols_2_and_4() {
        for protocol in [2, 4] {
            let dir = tempfile::tempdir().unwrap();
            write_all(dir.path(), &fixture(protocol));
            let ds = load_dir(dir.path(), None).unwrap();
            assert_eq!(ds.kind, DatasetKind::Cifar10);
            assert_fixture_contents(&ds.train, 5);
            assert_fixture_contents(&ds.test, 1);
        }
    }

    /// The official archive's files are Python 2 pickles: keys and the raw array bytes are
    /// `str` (SHORT_BINSTRING `U` / BINSTRING `T`), numpy's module is `numpy.core.multiarray`,
    /// and the labels list is filled with APPENDS. Written opcode by opcode (pickletools'
    /// opcode table) for 2 images labelled 9 and 1 whose pixels are all 5 and 6.
    fn python2_batch() -> Vec<u8> {
        fn short_str(out: &mut Vec<u8>, s: &[u8]) {
            out.push(b'U');
            out.push(s.len() as u8);
            out.extend_from_slice(s);
        }
        let mut p = vec![0x80, 2, b'}', b'('];
        short_str(&mut p, b"data");
        p.extend_from_slice(b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n");
        p.extend_from_slice(&[b'K', 0, 0x85]); // (0,)
        short_str(&mut p, b"b");
        p.extend_from_slice(&[0x87, b'R', b'(', b'K', 1]); // REDUCE, MARK, version 1
        p.extend_from_slice(&[b'K', 2, b'M', 0x00, 0x0c, 0x86]); // shape (2, 3072)
        p.extend_from_slice(b"cnumpy\ndtype\n");
        short_str(&mut p, b"u1");
        p.extend_from_slice(&[b'K', 0, b'K', 1, 0x87, b'R', b'(', b'K', 3]);
        short_str(&mut p, b"|");
        p.extend_from_slice(b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb");
        p.push(0x89); // False: C order
        p.push(b'T');
        p.extend_from_slice(&(2 * IMAGE_BYTES as u32).to_le_bytes());
        p.extend(std::iter::repeat_n(5u8, IMAGE_BYTES));
        p.extend(std::iter::repeat_n(6u8, IMAGE_BYTES));
        p.extend_from_slice(b"tb");
        short_str(&mut p, b"labels");
        p.extend_from_slice(&[b']', b'(', b'K', 9, b'K', 1, b'e']);
        short_str(&mut p, b"batch_label");
        short_str(&mut p, b"training batch 1 of 5");
        p.extend_from_slice(b"u.");
        p
    }

    #[test]
    fn reads_the_python2_layout_of_the_official_archive() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("cifar-10-batches-py");
        std::fs::create_dir(&sub).unwrap();
        write_all(&sub, &python2_batch());
        let ds = load_dir(dir.path(), None).unwrap();
        assert_eq!(ds.train.len(), 10);
        assert_eq!(&ds.train.labels[..2], &[9, 1]);
        assert!(ds.train.image(0).iter().all(|&p| p == 5));
        assert!(ds.train.image(1).iter().all(|&p| p == 6));
    }

    #[test]
    fn truncated_pickle_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let batch = fixture(4);
        write_all(dir.path(), &batch);
        std::fs::write(dir.path().join("data_batch_2"), &batch[..batch.len() / 2]).unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(
            err.contains("data_batch_2: not a CIFAR-10 python batch"),
            "{err}"
        );
        assert!(err.contains("not a readable pickle"), "{err}");
    }

    #[test]
    fn missing_test_batch_is_named() {
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path(), &fixture(2));
        std::fs::rename(
            dir.path().join("test_batch"),
            dir.path().join("test_batch.pkl"),
        )
        .unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("test_batch is missing"), "{err}");
        assert!(err.contains("CIFAR-10 python"), "{err}");
    }

    #[test]
    fn label_and_shape_mismatches_are_errors() {
        // Two labels for a 3-image array: the shape disagrees.
        let mut batch = python2_batch();
        let labels_at = batch.windows(6).position(|w| w == b"labels").unwrap();
        let k1 = labels_at + 6 + 2; // after "labels", ']' '('
        assert_eq!(&batch[k1..k1 + 4], &[b'K', 9, b'K', 1]);
        batch[k1 + 1] = 12; // label 12
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path(), &batch);
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("data_batch_1: label 12 of example 0"), "{err}");

        batch.splice(k1..k1 + 2, []); // one label left, two images
        write_all(dir.path(), &batch);
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("shape [2, 3072], expected [1, 3072]"), "{err}");
    }

    #[test]
    fn a_negative_label_is_named_as_written() {
        let mut batch = python2_batch();
        let labels_at = batch.windows(6).position(|w| w == b"labels").unwrap();
        let k1 = labels_at + 6 + 2; // after "labels", ']' '('
        assert_eq!(&batch[k1..k1 + 2], &[b'K', 9]);
        // BININT `J`: a signed 4-byte little-endian int, here -1.
        batch.splice(k1..k1 + 2, [b'J', 0xff, 0xff, 0xff, 0xff]);
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path(), &batch);
        let err = load_dir(dir.path(), None).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::BadLabel {
                    label: -1,
                    index: 0,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("data_batch_1: label -1 of example 0"),
            "{err}"
        );
    }

    #[test]
    fn a_pickled_list_is_not_a_batch() {
        let dir = tempfile::tempdir().unwrap();
        // protocol 2: PROTO, EMPTY_LIST, STOP
        write_all(dir.path(), &[0x80, 2, b']', b'.']);
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(
            err.contains("expected a dict with labels and data, found a list"),
            "{err}"
        );
    }
}
