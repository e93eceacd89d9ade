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
use crate::pipeline::permute::{div_rem, Permutation};

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
                let geometry = Geometry::new(self.n, block, blocks.len(), *short);
                // The positions window by window (a batch's mostly share one): its
                // permutation and its blocks found once.
                let mut out = Vec::with_capacity(end.saturating_sub(start) as usize);
                let mut p = start;
                while p < end {
                    let w = geometry.slot_of(p).0 / window;
                    let win = self.window(&geometry, w, window, blocks);
                    let until = end.min(win.first + win.within.len());
                    let at = out.len();
                    out.extend((p..until).map(|p| p - win.first));
                    win.within.apply_all(&mut out[at..]);
                    for j in &mut out[at..] {
                        *j = win.record(&geometry, *j);
                    }
                    p = until;
                }
                out
            }
            _ => {
                let p = Permutation::new(self.n, self.seed, self.epoch);
                let mut out: Vec<u64> = (start..end).collect();
                p.apply_all(&mut out);
                out
            }
        }
    }

    /// The window of blocks position `p` (`p < N`) is in; `None` without blocks.
    pub fn window_of(&self, p: u64) -> Option<u64> {
        match (self.shuffle, &self.blocks) {
            (Shuffle::Blocks { block, window }, Some((blocks, short))) => {
                let geometry = Geometry::new(self.n, block, blocks.len(), *short);
                Some(geometry.slot_of(p).0 / window)
            }
            _ => None,
        }
    }

    /// Windows of blocks in the epoch (0 without blocks).
    pub fn windows(&self) -> u64 {
        match (self.shuffle, &self.blocks) {
            (Shuffle::Blocks { window, .. }, Some((blocks, _))) => blocks.len().div_ceil(window),
            _ => 0,
        }
    }

    /// The positions `[start, end)` of window `w` (`w < windows()`).
    pub fn window_range(&self, w: u64) -> [u64; 2] {
        match (self.shuffle, &self.blocks) {
            (Shuffle::Blocks { block, window }, Some((blocks, short))) => {
                let g = Geometry::new(self.n, block, blocks.len(), *short);
                let slots = [w * window, ((w + 1) * window).min(g.slots)];
                [g.start(slots[0]), g.start(slots[1])]
            }
            _ => [0, self.n],
        }
    }

    /// What the position ranges `ranges` of window `w` (each within it; `w <
    /// windows()`) read: each record once, in the window's order of its blocks'
    /// records (block after block, each block's records in order: runs of consecutive
    /// records), and for each range, the row of each of its positions among them.
    pub fn window_reads(&self, w: u64, ranges: &[[u64; 2]]) -> (Vec<u64>, Vec<Vec<u32>>) {
        let (Shuffle::Blocks { block, window }, Some((blocks, short))) =
            (self.shuffle, &self.blocks)
        else {
            unreachable!("windows are the blocks shuffle's");
        };
        let g = Geometry::new(self.n, block, blocks.len(), *short);
        let win = self.window(&g, w, window, blocks);
        let record = |j: u64| win.record(&g, j);
        // Each position's index among the window's records.
        let picks: Vec<Vec<u64>> = (ranges.iter())
            .map(|&[from, to]| {
                let mut list: Vec<u64> = (from..to).map(|p| p - win.first).collect();
                win.within.apply_all(&mut list);
                list
            })
            .collect();
        let picked: usize = picks.iter().map(Vec::len).sum();
        let size = win.within.len();
        let mut records = Vec::with_capacity(picked);
        // The indices in order: counted in one pass over the window's where it is not
        // much larger than what is picked, else sorted.
        let rows: Vec<Vec<u32>> = if size <= 16 * picked as u64 + (1 << 20) {
            let mut row = vec![u32::MAX; size as usize];
            for &j in picks.iter().flatten() {
                row[j as usize] = 0;
            }
            for (j, r) in row.iter_mut().enumerate() {
                if *r == 0 {
                    *r = records.len() as u32;
                    records.push(record(j as u64));
                }
            }
            (picks.iter())
                .map(|list| list.iter().map(|&j| row[j as usize]).collect())
                .collect()
        } else {
            let mut sorted: Vec<u64> = picks.iter().flatten().copied().collect();
            sorted.sort_unstable();
            sorted.dedup();
            records.extend(sorted.iter().map(|&j| record(j)));
            (picks.iter())
                .map(|list| {
                    (list.iter())
                        .map(|j| sorted.binary_search(j).unwrap_or(0) as u32)
                        .collect()
                })
                .collect()
        };
        (records, rows)
    }

    /// Window `w`: its positions' permutation and its slots' blocks.
    fn window(&self, g: &Geometry, w: u64, window: u64, blocks: &Permutation) -> Window {
        let slots = w * window..((w + 1) * window).min(g.slots);
        let first = g.start(slots.start);
        let size = g.start(slots.end) - first;
        Window {
            slot: slots.start,
            first,
            within: Permutation::new(size, mix64(self.seed ^ mix64(w + 1)), self.epoch),
            blocks: slots.map(|slot| blocks.apply(slot)).collect(),
        }
    }
}

/// Where the blocks' slots lie among positions: every slot holds `block` positions but
/// slot `short`, which holds the short last block's.
struct Geometry {
    block: u64,
    slots: u64,
    short: u64,
    /// Records of the short (last) block.
    last: u64,
}

impl Geometry {
    fn new(n: u64, block: u64, slots: u64, short: u64) -> Geometry {
        Geometry {
            block,
            slots,
            short,
            last: n - (slots - 1) * block,
        }
    }

    /// The first position of slot `j` (`j <= slots`).
    fn start(&self, j: u64) -> u64 {
        if j <= self.short {
            j * self.block
        } else {
            j * self.block - (self.block - self.last)
        }
    }

    /// The slot position `p` is in, and its offset there.
    fn slot_of(&self, p: u64) -> (u64, u64) {
        let (block, short) = (self.block, self.short);
        let end_short = short * block + self.last;
        if p < short * block {
            div_rem(p, block)
        } else if p < end_short {
            (short, p - short * block)
        } else {
            let (slot, offset) = div_rem(p - end_short, block);
            (short + 1 + slot, offset)
        }
    }
}

/// One window of blocks, as a batch's positions need it.
struct Window {
    /// Its first slot.
    slot: u64,
    /// Its first position.
    first: u64,
    /// The permutation of its positions.
    within: Permutation,
    /// The block in each of its slots.
    blocks: Vec<u64>,
}

impl Window {
    /// The record at the window's `j`-th position (`j` < its size) of geometry `g`.
    #[inline]
    fn record(&self, g: &Geometry, j: u64) -> u64 {
        let (slot, offset) = g.slot_of(self.first + j);
        self.blocks[(slot - self.slot) as usize] * g.block + offset
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
        // Every window's positions read whole blocks, `window` of them (the last fewer).
        let (n, block, window) = (2_000_000u64, 20_763u64, 8u64);
        let order = EpochOrder::new(n, Shuffle::Blocks { block, window }, 1, 0);
        let mut next = 0;
        for w in 0..order.windows() {
            let [start, end] = order.window_range(w);
            assert_eq!(start, next, "windows follow each other");
            next = end;
            let records = order.records(start, end);
            let blocks: std::collections::BTreeSet<u64> =
                records.iter().map(|r| r / block).collect();
            assert_eq!(
                blocks.len() as u64,
                window.min(n.div_ceil(block) - w * window),
                "window {w}"
            );
            assert!(records
                .iter()
                .all(|&r| order.window_of(start) == Some(w) && r < n));
        }
        assert_eq!(next, n);
        let again = EpochOrder::new(n, Shuffle::Blocks { block, window }, 1, 1);
        assert_ne!(order.records(0, n), again.records(0, n));
    }

    /// A window's reads: each record its ranges' positions read, once, block after block
    /// in runs of consecutive records, and each position's row among them; counted or
    /// (ranges much smaller than their window) sorted.
    #[test]
    fn window_reads_are_the_positions_records_in_runs() {
        for (n, block, window, ranges) in [
            (1000u64, 10u64, 4u64, vec![[0u64, 40]]),
            (1000, 10, 4, vec![[40, 45], [50, 51], [60, 80]]),
            (997, 7, 3, vec![[987, 990], [992, 997]]),
            (3_000_000, 200_000, 8, vec![[10, 20], [400_000, 400_003]]),
        ] {
            let order = EpochOrder::new(n, Shuffle::Blocks { block, window }, 3, 2);
            let w = order.window_of(ranges[0][0]).unwrap();
            let (records, rows) = order.window_reads(w, &ranges);
            let want: Vec<u64> = ranges
                .iter()
                .flat_map(|&[a, b]| order.records(a, b))
                .collect();
            let got: Vec<u64> = rows
                .iter()
                .flatten()
                .map(|&r| records[r as usize])
                .collect();
            assert_eq!(got, want, "{n} {block} {window} {ranges:?}");
            let mut once = records.clone();
            once.sort_unstable();
            once.dedup();
            assert_eq!(once.len(), records.len(), "each record once");
            // Runs: within a block, records in order.
            for pair in records.windows(2) {
                if pair[0] / block == pair[1] / block {
                    assert!(pair[0] < pair[1], "{pair:?}");
                }
            }
        }
    }
}
