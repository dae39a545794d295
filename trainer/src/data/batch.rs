//! Turning sampled indices into a normalised `f32` batch, the input the model takes.

use rand::{rngs::StdRng, SeedableRng};

use super::{augment_cifar, DatasetKind, Split};

/// A batch ready for the model: `images` is `len × C × H × W` normalised pixels.
#[derive(Debug, Clone)]
pub struct Batch {
    /// `len × C × H × W`, `(pixel / 255 - mean[c]) / std[c]`.
    pub images: Vec<f32>,
    /// Class indices.
    pub labels: Vec<i64>,
    /// `[len, C, H, W]`.
    pub shape: [usize; 4],
}

/// Builds the batch of `indices` from `split`. With `augment = Some((seed, epoch))` each image
/// is augmented (CIFAR-10 training only) with a generator drawn from the seed, the epoch and
/// the example's index — so an example's augmentation does not depend on which rank or batch
/// position it lands in, and results do not depend on the world size.
pub fn make_batch(
    split: &Split,
    kind: DatasetKind,
    indices: &[usize],
    augment: Option<(u64, u64)>,
) -> Batch {
    let [c, h, w] = split.shape;
    let plane = h * w;
    let (mean, std) = kind.normalisation();
    let mut images = Vec::with_capacity(indices.len() * c * plane);
    let mut labels = Vec::with_capacity(indices.len());
    let mut scratch = Vec::new();
    for &i in indices {
        scratch.clear();
        scratch.extend_from_slice(split.image(i));
        if let Some((seed, epoch)) = augment {
            let mix = seed ^ epoch.rotate_left(32) ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            augment_cifar(&mut scratch, split.shape, &mut StdRng::seed_from_u64(mix));
        }
        for (ch, pixels) in scratch.chunks_exact(plane).enumerate() {
            images.extend(
                pixels
                    .iter()
                    .map(|&p| (f32::from(p) / 255.0 - mean[ch]) / std[ch]),
            );
        }
        labels.push(i64::from(split.labels[i]));
    }
    Batch {
        images,
        labels,
        shape: [indices.len(), c, h, w],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split() -> Split {
        Split {
            images: vec![0, 255, 51, 102],
            labels: vec![3, 7],
            shape: [1, 1, 2],
        }
    }

    #[test]
    fn normalises_with_the_dataset_statistics() {
        let b = make_batch(&split(), DatasetKind::Mnist, &[1, 0], None);
        assert_eq!(b.shape, [2, 1, 1, 2]);
        assert_eq!(b.labels, vec![7, 3]);
        let expected = |p: f32| (p / 255.0 - 0.1307) / 0.3081;
        let want = [
            expected(51.0),
            expected(102.0),
            expected(0.0),
            expected(255.0),
        ];
        for (got, want) in b.images.iter().zip(want) {
            assert!((got - want).abs() < 1e-6);
        }
    }

    #[test]
    fn augmentation_depends_on_seed_and_epoch_not_batch_position() {
        let split = Split {
            images: (0..2 * 3072).map(|i| (i % 253) as u8).collect(),
            labels: vec![0, 1],
            shape: [3, 32, 32],
        };
        let alone = make_batch(&split, DatasetKind::Cifar10, &[1], Some((9, 2)));
        let paired = make_batch(&split, DatasetKind::Cifar10, &[0, 1], Some((9, 2)));
        assert_eq!(alone.images[..], paired.images[3072..]);
        let plain = make_batch(&split, DatasetKind::Cifar10, &[1], None);
        let other_epochs: Vec<_> = (3..8)
            .map(|e| make_batch(&split, DatasetKind::Cifar10, &[1], Some((9, e))).images)
            .collect();
        assert!(other_epochs.iter().any(|images| images != &alone.images));
        assert!(other_epochs.iter().any(|images| images != &plain.images));
    }
}
