//! Every hash the output depends on, in one place: the shuffle order, split membership
//! (by position or by key) and the reader's shuffle stream. Each is fixed forever: a
//! change here changes which records land in which split and shard.

/// The splitmix64 finalizer: a bijection on u64 that spreads every input bit.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The splitmix64 increment (2^64 / φ).
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// A seeded bijective hash of a record's global index, one per purpose (`salt`): the
/// same index and seed always give the same value, and no two indices collide.
pub(crate) fn index_hash(index: u64, seed: u64, salt: u64) -> u64 {
    mix64(index ^ mix64(seed ^ salt))
}

/// Salt of the write-time shuffle order.
pub(crate) const SHUFFLE_SALT: u64 = 0x6a09_e667_f3bc_c908;
/// Salt of position-based split membership.
pub(crate) const SPLIT_SALT: u64 = 0xbb67_ae85_84ca_a73b;

/// The seeded hash of a record's position in an input file (`convert tfrecord`'s splits
/// without a key): the file's index in the run's inputs and the record's index in the
/// file, so a worker that starts at file k assigns its records as one machine would,
/// without counting the records of the files before k.
pub(crate) fn file_position_hash(file: u64, record: u64, seed: u64) -> u64 {
    index_hash(
        record,
        seed ^ mix64(file.wrapping_add(1).wrapping_mul(GOLDEN)),
        SPLIT_SALT,
    )
}

/// FNV-1a over a value's canonical bytes (after a type tag), then [`mix64`]: a hash that
/// never changes across runs, versions or platforms (split membership by key).
pub(crate) fn stable_hash(tag: u8, bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in std::iter::once(&tag).chain(bytes) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(h)
}

/// SplitMix64: small, fast, and the same sequence on every platform.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator for one epoch of a seeded stream.
    pub fn for_epoch(seed: u64, epoch: u64) -> Rng {
        Rng(seed ^ epoch.wrapping_mul(GOLDEN))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix64(self.0)
    }

    /// A uniform index below `n` (`n > 0`), by multiply-shift.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Shuffles a slice in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned values: split membership and shuffle order must never move.
    #[test]
    fn the_hashes_never_change() {
        assert_eq!(mix64(0), 0);
        assert_eq!(mix64(1), 0x5692_161d_100b_05e5);
        assert_eq!(Rng::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(stable_hash(0, b""), mix64(0xaf63_bd4c_8601_b7df));
        assert_ne!(index_hash(1, 2, SHUFFLE_SALT), index_hash(1, 2, SPLIT_SALT));
    }
}
