//! The CIFAR-10 training augmentation of the reference recipe: `RandomCrop(32, padding=4)`
//! (zero padding) then `RandomHorizontalFlip(p=0.5)`, as in torchvision.

use rand::Rng;

/// Augments one `C×H×W` image in place with a random crop of the zero-padded image and a
/// random horizontal flip.
pub fn augment_cifar(image: &mut [u8], shape: [usize; 3], rng: &mut impl Rng) {
    const PAD: i32 = 4;
    let [c, h, w] = shape;
    let dy = rng.random_range(-PAD..=PAD) as isize;
    let dx = rng.random_range(-PAD..=PAD) as isize;
    let flip = rng.random_bool(0.5);
    let source = image.to_vec();
    for ch in 0..c {
        for y in 0..h {
            for x in 0..w {
                let sx = if flip { w - 1 - x } else { x } as isize + dx;
                let sy = y as isize + dy;
                let inside = (0..h as isize).contains(&sy) && (0..w as isize).contains(&sx);
                image[(ch * h + y) * w + x] = if inside {
                    source[(ch * h + sy as usize) * w + sx as usize]
                } else {
                    0
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    #[test]
    fn keeps_pixels_or_zero_pads_and_varies() {
        let shape = [3, 32, 32];
        let original: Vec<u8> = (0..3072).map(|i| (i % 255 + 1) as u8).collect();
        let mut rng = StdRng::seed_from_u64(1);
        let mut changed = 0;
        for _ in 0..20 {
            let mut image = original.clone();
            augment_cifar(&mut image, shape, &mut rng);
            // Every output pixel is zero padding or some pixel of the same channel.
            for ch in 0..3 {
                let plane = &original[ch * 1024..(ch + 1) * 1024];
                assert!(image[ch * 1024..(ch + 1) * 1024]
                    .iter()
                    .all(|p| *p == 0 || plane.contains(p)));
            }
            changed += usize::from(image != original);
        }
        assert!(
            changed > 10,
            "augmentation left {} of 20 images unchanged",
            20 - changed
        );
    }

    #[test]
    fn flip_without_shift_mirrors_rows() {
        // Find a seed whose draw is (dy, dx) = (0, 0) with a flip, then check the mirror.
        let shape = [1, 2, 3];
        for seed in 0..10_000 {
            let mut probe = StdRng::seed_from_u64(seed);
            let (dy, dx, flip) = (
                probe.random_range(-4..=4),
                probe.random_range(-4..=4),
                probe.random_bool(0.5),
            );
            if (dy, dx, flip) == (0i32, 0i32, true) {
                let mut image = vec![1, 2, 3, 4, 5, 6];
                augment_cifar(&mut image, shape, &mut StdRng::seed_from_u64(seed));
                assert_eq!(image, vec![3, 2, 1, 6, 5, 4]);
                return;
            }
        }
        panic!("no seed drew a pure flip");
    }
}
