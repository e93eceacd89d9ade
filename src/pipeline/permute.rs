//! A keyed bijection of `[0, N)`: the order in which a global shuffle visits an epoch's
//! records (or blocks of them), from (seed, epoch), in O(1) memory whatever N.
//!
//! A balanced Feistel network over the smallest even number of bits that holds N, with
//! six rounds of a keyed 64-bit mix, is a bijection of `[0, 2^bits)`; **cycle
//! walking** (applying it again while the value is `>= N`) restricts it to `[0, N)`,
//! still a bijection, since the walk from any `i < N` returns below N before it could
//! meet another start. The domain is under 4N, so a position costs under four network
//! passes on average. [`Permutation::invert`] walks the inverse network.

use crate::hash::mix64;

/// Feistel rounds: enough for a mix whose outputs look independent of the inputs'
/// order (three are a pseudo-random permutation in theory; six leave a margin).
const ROUNDS: usize = 6;

/// A permutation of `[0, n)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permutation {
    n: u64,
    /// Bits of each half of the network's input.
    half: u32,
    keys: [u64; ROUNDS],
}

impl Permutation {
    /// The permutation of `[0, n)` that `(seed, epoch)` names: the same for the same
    /// three, another for another seed or epoch.
    pub fn new(n: u64, seed: u64, epoch: u64) -> Permutation {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half = bits.div_ceil(2);
        let base = mix64(seed ^ mix64(epoch.wrapping_add(0x6a09_e667_f3bc_c909)));
        let mut keys = [0; ROUNDS];
        for (r, key) in keys.iter_mut().enumerate() {
            *key = mix64(base.wrapping_add((r as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        }
        Permutation { n, half, keys }
    }

    /// N.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether N is 0.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn mask(&self) -> u64 {
        if self.half >= 64 {
            u64::MAX
        } else {
            (1u64 << self.half) - 1
        }
    }

    fn round(&self, value: u64, key: u64) -> u64 {
        mix64(value ^ key) & self.mask()
    }

    fn forward(&self, x: u64) -> u64 {
        let mask = self.mask();
        let (mut left, mut right) = (x >> self.half, x & mask);
        for &key in &self.keys {
            (left, right) = (right, left ^ self.round(right, key));
        }
        (left << self.half) | right
    }

    fn backward(&self, x: u64) -> u64 {
        let mask = self.mask();
        let (mut left, mut right) = (x >> self.half, x & mask);
        for &key in self.keys.iter().rev() {
            (left, right) = (right ^ self.round(left, key), left);
        }
        (left << self.half) | right
    }

    /// The element at position `i` (`i < N`).
    pub fn apply(&self, i: u64) -> u64 {
        debug_assert!(i < self.n, "position {i} of {}", self.n);
        if self.n <= 1 {
            return i;
        }
        let mut x = self.forward(i);
        while x >= self.n {
            x = self.forward(x);
        }
        x
    }

    /// `apply` of each of `positions`, in place (each `< N`). The network passes of
    /// many positions at once, without a branch between them, overlap in the CPU; the
    /// few that walk again (the domain is under 4N) are passed again afterwards.
    pub fn apply_all(&self, positions: &mut [u64]) {
        debug_assert!(positions.iter().all(|&i| i < self.n));
        if self.n <= 1 {
            return;
        }
        for x in positions.iter_mut() {
            *x = self.forward(*x);
        }
        let mut again: Vec<usize> = (0..positions.len())
            .filter(|&i| positions[i] >= self.n)
            .collect();
        while !again.is_empty() {
            for &i in &again {
                positions[i] = self.forward(positions[i]);
            }
            again.retain(|&i| positions[i] >= self.n);
        }
    }

    /// The position of element `j` (`j < N`): `apply(invert(j)) == j`.
    pub fn invert(&self, j: u64) -> u64 {
        debug_assert!(j < self.n, "element {j} of {}", self.n);
        if self.n <= 1 {
            return j;
        }
        let mut x = self.backward(j);
        while x >= self.n {
            x = self.backward(x);
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_n_to_10000_is_a_bijection() {
        let mut seen = Vec::new();
        for n in 1..=10_000u64 {
            let p = Permutation::new(n, 7, n % 3);
            seen.clear();
            seen.resize(n as usize, false);
            for i in 0..n {
                let j = p.apply(i);
                assert!(j < n, "n {n}: {i} -> {j}");
                assert!(!seen[j as usize], "n {n}: {j} twice");
                seen[j as usize] = true;
            }
        }
    }

    /// Near 2^40 a full check is out of reach: sampled positions land in range, and the
    /// inverse takes each back (an injective map on them).
    #[test]
    fn n_near_2_to_the_40_is_invertible_where_sampled() {
        for n in [(1u64 << 40) - 3, 1 << 40, (1 << 40) + 12_345] {
            let p = Permutation::new(n, 3, 1);
            let mut outputs = std::collections::HashSet::new();
            for k in 0..20_000u64 {
                let i = mix64(k) % n;
                let j = p.apply(i);
                assert!(j < n);
                assert_eq!(p.invert(j), i, "n {n}: position {i}");
                outputs.insert((i, j));
            }
            // Spread: outputs of consecutive positions are not consecutive.
            let near = (0..1000u64).filter(|&i| p.apply(i).abs_diff(p.apply(i + 1)) < 1000);
            assert!(near.count() < 10);
        }
    }

    #[test]
    fn seeds_and_epochs_give_other_orders() {
        let n = 1000;
        let order = |seed, epoch| {
            let p = Permutation::new(n, seed, epoch);
            (0..n).map(|i| p.apply(i)).collect::<Vec<u64>>()
        };
        assert_eq!(
            order(1, 0),
            order(1, 0),
            "the same (seed, epoch), the same order"
        );
        assert_ne!(order(1, 0), order(2, 0));
        assert_ne!(order(1, 0), order(1, 1));
        // Not the identity, and no long runs of consecutive records.
        let o = order(1, 0);
        let runs = o.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(runs < 10, "{runs} consecutive pairs");
    }

    /// Many positions at once give what each gives alone, in their order (those that
    /// walk again among those that do not), small and near 2^40.
    #[test]
    fn all_at_once_is_each_alone() {
        for n in [1u64, 2, 3, 255, 256, 257, 1000, 168_000, (1 << 40) + 12_345] {
            let p = Permutation::new(n, 11, 2);
            let positions: Vec<u64> = (0..2000u64).map(|k| mix64(k) % n).collect();
            let mut all = positions.clone();
            p.apply_all(&mut all);
            let each: Vec<u64> = positions.iter().map(|&i| p.apply(i)).collect();
            assert_eq!(all, each, "n {n}");
        }
        let mut none: [u64; 0] = [];
        Permutation::new(5, 1, 1).apply_all(&mut none);
    }

    #[test]
    fn tiny_sets() {
        assert!(Permutation::new(0, 1, 1).is_empty());
        assert_eq!(Permutation::new(1, 1, 1).apply(0), 0);
        let p = Permutation::new(2, 5, 0);
        let mut two = [p.apply(0), p.apply(1)];
        two.sort_unstable();
        assert_eq!(two, [0, 1]);
    }
}
