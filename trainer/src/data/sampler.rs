//! The equivalent of PyTorch's `torch.utils.data.DistributedSampler` (shuffle on,
//! `drop_last=False`): every rank gets `ceil(len / world_size)` indices, the shuffled index
//! list padded by wrapping around to its start so all ranks run the same number of steps.

use rand::{rngs::StdRng, seq::SliceRandom, SeedableRng};

/// Splits `0..len` into `world_size` disjoint (before padding) shards, reshuffled each epoch.
#[derive(Debug, Clone, Copy)]
pub struct DistributedSampler {
    len: usize,
    world_size: usize,
    rank: usize,
    seed: u64,
}

impl DistributedSampler {
    /// A sampler for `rank` of `world_size` over a dataset of `len` examples.
    ///
    /// # Panics
    /// If `rank >= world_size` or `world_size == 0`: callers validate these first.
    pub fn new(len: usize, world_size: usize, rank: usize, seed: u64) -> Self {
        assert!(
            world_size > 0 && rank < world_size,
            "rank {rank} of world size {world_size}"
        );
        Self {
            len,
            world_size,
            rank,
            seed,
        }
    }

    /// Indices per rank per epoch: `ceil(len / world_size)`.
    pub fn num_samples(&self) -> usize {
        self.len.div_ceil(self.world_size)
    }

    /// This rank's indices for `epoch`: a permutation drawn from `seed + epoch` (the same on
    /// every rank), padded to `num_samples() * world_size` by repeating its start, then every
    /// `world_size`-th element from position `rank`.
    pub fn indices(&self, epoch: u64) -> Vec<usize> {
        let mut all: Vec<usize> = (0..self.len).collect();
        all.shuffle(&mut StdRng::seed_from_u64(self.seed.wrapping_add(epoch)));
        let total = self.num_samples() * self.world_size;
        let mut i = 0;
        while all.len() < total {
            all.push(all[i]);
            i += 1;
        }
        all.into_iter()
            .skip(self.rank)
            .step_by(self.world_size)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn shards_are_disjoint_and_cover_the_dataset() {
        for world in 1..=4 {
            let shards: Vec<_> = (0..world)
                .map(|r| DistributedSampler::new(100, world, r, 7).indices(3))
                .collect();
            let all: HashSet<usize> = shards.iter().flatten().copied().collect();
            assert_eq!(
                all.len(),
                100,
                "world {world}: every example is in some shard"
            );
            // Only the padding (100 rounded up to a multiple of the world size) repeats.
            let total = 100usize.div_ceil(world) * world;
            assert_eq!(
                shards.iter().map(Vec::len).sum::<usize>(),
                total,
                "world {world}"
            );
        }
    }

    #[test]
    fn pads_like_pytorch_so_every_rank_has_the_same_count() {
        // 10 examples over 4 ranks: ceil(10/4) = 3 each, 2 indices repeated from the start.
        let shards: Vec<_> = (0..4)
            .map(|r| DistributedSampler::new(10, 4, r, 0).indices(0))
            .collect();
        assert!(shards.iter().all(|s| s.len() == 3));
        let flat: Vec<usize> = shards.iter().flatten().copied().collect();
        assert_eq!(flat.iter().collect::<HashSet<_>>().len(), 10);
        // Rank 2 and 3 get positions 10 and 11 of the padded list: the first two of the
        // permutation, which ranks 0 and 1 hold at their position 0.
        assert_eq!(shards[2][2], shards[0][0]);
        assert_eq!(shards[3][2], shards[1][0]);
    }

    #[test]
    fn pads_by_wrapping_more_than_once_when_world_exceeds_len() {
        let shards: Vec<_> = (0..4)
            .map(|r| DistributedSampler::new(1, 4, r, 0).indices(0))
            .collect();
        assert!(shards.iter().all(|s| s == &vec![0]));
    }

    #[test]
    fn reshuffles_per_epoch_and_is_reproducible() {
        let s = DistributedSampler::new(1000, 2, 1, 42);
        assert_eq!(s.indices(1), s.indices(1));
        assert_ne!(s.indices(1), s.indices(2));
        assert_ne!(
            s.indices(1),
            DistributedSampler::new(1000, 2, 1, 43).indices(1)
        );
    }

    #[test]
    fn interleaved_shards_form_the_single_rank_batches() {
        // The property the 1×64 ≡ 2×32 equivalence rests on: step k of 2 ranks with batch 32
        // together see step k of 1 rank with batch 64.
        let one = DistributedSampler::new(256, 1, 0, 5).indices(0);
        let r0 = DistributedSampler::new(256, 2, 0, 5).indices(0);
        let r1 = DistributedSampler::new(256, 2, 1, 5).indices(0);
        for k in 0..4 {
            let mut two: Vec<usize> = r0[k * 32..(k + 1) * 32].to_vec();
            two.extend(&r1[k * 32..(k + 1) * 32]);
            two.sort();
            let mut single = one[k * 64..(k + 1) * 64].to_vec();
            single.sort();
            assert_eq!(two, single, "step {k}");
        }
    }
}
