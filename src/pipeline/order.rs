//! The order of an epoch's records under a global shuffle: position `p` of the epoch
//! (all ranks and workers together) reads record [`EpochOrder::record`]`(p)`, a
//! bijection of `[0, N)` from (seed, epoch) in O(1) memory.
//!
//! - **Global**: the [`Permutation`] of the records.
//! - **Blocks**: the records cut into blocks of `block` consecutive records (the last
//!   shorter); the blocks in the permutation of the blocks, then the records of each
//!   window of `window` consecutive blocks (in that order) in the permutation of the
//!   window's positions. Reads stay within a window's blocks: runs of consecutive
//!   records, for stores and for sets too large for per-record offsets.

use crate::hash::mix64;
use crate::pipeline::permute::Permutation;

/// How an epoch's records are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shuffle {
    /// Every record anywhere.
    Global,
    /// Blocks of `block` records, shuffled, then records within windows of `window`
    /// blocks.
    Blocks {
        /// Records a block.
        block: u64,
        /// Blocks a window.
        window: u64,
    },
}

/// The order of one epoch.
#[derive(Debug, Clone)]
pub struct EpochOrder {
    n: u64,
    seed: u64,
    epoch: u64,
    shuffle: Shuffle,
    /// Blocks: the permutation of the blocks, and the slot the short last block is in.
    blocks: Option<(Permutation, u64)>,
}

impl EpochOrder {
    /// The order of epoch `epoch` of `n` records.
    pub fn new(n: u64, shuffle: Shuffle, seed: u64, epoch: u64) -> EpochOrder {
        let shuffle = match shuffle {
            Shuffle::Blocks { block, window } => Shuffle::Blocks {
                block: block.max(1),
                window: window.max(1),
            },
            s => s,
        };
        let blocks = match shuffle {
            Shuffle::Global => None,
            Shuffle::Blocks { block, .. } => {
                let blocks = Permutation::new(n.div_ceil(block), seed, epoch);
                let short = if blocks.is_empty() {
                    0
                } else {
                    blocks.invert(blocks.len() - 1)
                };
                Some((blocks, short))
            }
        };
        EpochOrder {
            n,
            seed,
            epoch,
            shuffle,
            blocks,
        }
    }

    /// Records in the epoch.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether the epoch has no record.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The record at position `p` (`p < N`).
    pub fn record(&self, p: u64) -> u64 {
        self.records(p, p + 1)[0]
    }

    /// The records at positions `[start, end)`, in order.
    pub fn records(&self, start: u64, end: u64) -> Vec<u64> {
        match (self.shuffle, &self.blocks) {
            (Shuffle::Blocks { block, window }, Some((blocks, short))) => {
                // A batch's positions mostly share a window: its permutation made once.
                let mut within: Option<(u64, Permutation)> = None;
                (start..end)
                    .map(|i| self.in_blocks(i, block, window, blocks, *short, &mut within))
                    .collect()
            }
            _ => {
                let p = Permutation::new(self.n, self.seed, self.epoch);
                (start..end).map(|i| p.apply(i)).collect()
            }
        }
    }

    fn in_blocks(
        &self,
        p: u64,
        block: u64,
        window: u64,
        blocks: &Permutation,
        short: u64,
        within: &mut Option<(u64, Permutation)>,
    ) -> u64 {
        let slots = blocks.len();
        let last = self.n - (slots - 1) * block;
        // Where slot j starts (the short last block is in slot `short`).
        let start = |j: u64| {
            if j <= short {
                j * block
            } else {
                j * block - (block - last)
            }
        };
        let slot_of = |p: u64| -> (u64, u64) {
            let end_short = short * block + last;
            if p < short * block {
                (p / block, p % block)
            } else if p < end_short {
                (short, p - short * block)
            } else {
                let q = p - end_short;
                (short + 1 + q / block, q % block)
            }
        };
        let (slot, _) = slot_of(p);
        let w = slot / window;
        let first = start(w * window);
        let end = start(((w + 1) * window).min(slots));
        let size = end - first;
        let permutation = match within {
            Some((at, permutation)) if *at == w => permutation,
            _ => {
                let made = Permutation::new(size, mix64(self.seed ^ mix64(w + 1)), self.epoch);
                &mut within.insert((w, made)).1
            }
        };
        let (slot, offset) = slot_of(first + permutation.apply(p - first));
        blocks.apply(slot) * block + offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_bijection(order: &EpochOrder) {
        let n = order.len();
        let mut seen = vec![false; n as usize];
        for r in order.records(0, n) {
            assert!(r < n && !seen[r as usize], "{order:?}: {r}");
            seen[r as usize] = true;
        }
    }

    #[test]
    fn every_order_is_a_bijection() {
        for n in [1u64, 2, 3, 7, 64, 100, 1000, 1001, 4097] {
            for shuffle in [
                Shuffle::Global,
                Shuffle::Blocks {
                    block: 1,
                    window: 1,
                },
                Shuffle::Blocks {
                    block: 10,
                    window: 3,
                },
                Shuffle::Blocks {
                    block: 64,
                    window: 4,
                },
                Shuffle::Blocks {
                    block: 5000,
                    window: 2,
                },
            ] {
                check_bijection(&EpochOrder::new(n, shuffle, 9, n % 4));
            }
        }
    }

    /// Blocks: a window's positions read only its blocks' records (runs of consecutive
    /// records); the next epoch orders them otherwise.
    #[test]
    fn blocks_keep_reads_within_a_window() {
        let (n, block, window) = (1000u64, 10u64, 4u64);
        let order = EpochOrder::new(n, Shuffle::Blocks { block, window }, 1, 0);
        let first: std::collections::BTreeSet<u64> = order
            .records(0, block * window)
            .iter()
            .map(|r| r / block)
            .collect();
        assert_eq!(first.len() as u64, window, "{first:?}");
        let again = EpochOrder::new(n, Shuffle::Blocks { block, window }, 1, 1);
        assert_ne!(order.records(0, n), again.records(0, n));
    }
}
