//! The values of a bytes column, as views (the layout of Arrow's `BinaryView`): a short
//! value is copied into the column's own buffer; a long one (an image, say) in a mapped
//! shard stays where it is and the column points at it. So a 100 KB JPEG is never copied
//! between the page cache and the code that decodes it, while a column of short strings
//! is still one contiguous buffer. Values of records read into buffers (compressed
//! shards, or mapping off) are copied: their buffers go back to the pool, which keeps
//! memory bounded.

use std::fmt;

/// Values at least this long are referenced in place, not copied.
pub const REFERENCE_MIN: usize = 16 << 10;

/// The bytes a value is referenced in (a shard's map, or a store's read; the codec knows
/// them only as bytes).
pub type SharedBytes = bytes::Bytes;

type Buffer = SharedBytes;

/// Buffer index of the values copied into `copied`.
const COPIED: u32 = 0;

#[derive(Clone, Copy)]
struct View {
    /// `COPIED`, or 1 + an index into `buffers`.
    buffer: u32,
    start: usize,
    end: usize,
}

/// The values of a bytes column (see the module docs).
#[derive(Clone, Default)]
pub struct BytesValues {
    views: Vec<View>,
    copied: Vec<u8>,
    buffers: Vec<Buffer>,
}

/// Where the record being parsed lives.
#[derive(Clone, Copy)]
pub(crate) enum Home<'a> {
    /// At `start` in shared bytes (a mapped shard, a store's read): long values are
    /// referenced.
    Mapped(&'a SharedBytes, usize),
    /// In a pooled buffer: every value is copied.
    Owned,
}

impl BytesValues {
    /// No values.
    pub fn new() -> BytesValues {
        BytesValues::default()
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.views.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }

    /// Value `i`.
    ///
    /// # Panics
    ///
    /// If `i` is out of range (as slice indexing does).
    pub fn get(&self, i: usize) -> &[u8] {
        let v = self.views[i];
        match v.buffer {
            COPIED => &self.copied[v.start..v.end],
            b => &self.buffers[b as usize - 1][v.start..v.end],
        }
    }

    /// Every value, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The values' bytes in all.
    pub fn total_len(&self) -> u64 {
        self.views.iter().map(|v| (v.end - v.start) as u64).sum()
    }

    /// Bytes copied into the column's own buffer (views not counted).
    pub fn copied_len(&self) -> usize {
        self.copied.len()
    }

    /// Bytes allocated for the views, the copies and the references to mapped shards.
    pub(crate) fn held_bytes(&self) -> u64 {
        (self.views.capacity() * std::mem::size_of::<View>()
            + self.copied.capacity()
            + self.buffers.capacity() * std::mem::size_of::<Buffer>()) as u64
    }

    /// How many values are referenced in place rather than copied.
    pub fn referenced(&self) -> usize {
        self.views.iter().filter(|v| v.buffer != COPIED).count()
    }

    /// The Arrow `Binary` layout: `len + 1` offsets into one contiguous buffer (a copy).
    pub fn to_offsets_and_data(&self) -> (Vec<u64>, Vec<u8>) {
        let mut offsets = Vec::with_capacity(self.len() + 1);
        let mut data = Vec::with_capacity(self.total_len() as usize);
        offsets.push(0);
        for value in self.iter() {
            data.extend_from_slice(value);
            offsets.push(data.len() as u64);
        }
        (offsets, data)
    }

    /// Makes room for `values` more values of `bytes` bytes in all.
    pub(crate) fn reserve(&mut self, values: usize, bytes: usize) {
        self.views.reserve_exact(values);
        self.copied.reserve_exact(bytes);
    }

    /// Appends a value copied from anywhere.
    pub fn push(&mut self, value: &[u8]) {
        let start = self.copied.len();
        self.copied.extend_from_slice(value);
        self.views.push(View {
            buffer: COPIED,
            start,
            end: self.copied.len(),
        });
    }

    /// Appends `value`, a slice of `record`, which lives at `home`: referenced in place
    /// when long and mapped, else copied.
    pub(crate) fn push_from(&mut self, value: &[u8], record: &[u8], home: Home<'_>) {
        let Home::Mapped(map, start) = home else {
            return self.push(value);
        };
        if value.len() < REFERENCE_MIN {
            return self.push(value);
        }
        // `value` is a subslice of `record`: its offset is the distance between them.
        let within = value.as_ptr() as usize - record.as_ptr() as usize;
        debug_assert!(within + value.len() <= record.len());
        let buffer = self.buffer_of(map);
        self.views.push(View {
            buffer,
            start: start + within,
            end: start + within + value.len(),
        });
    }

    fn buffer_of(&mut self, map: &SharedBytes) -> u32 {
        // Records of one batch come from a few files; the last one is the likeliest.
        let found = self.buffers.iter().rposition(|m| same(m, map));
        let index = found.unwrap_or_else(|| {
            self.buffers.push(map.clone());
            self.buffers.len() - 1
        });
        index as u32 + 1
    }
}

/// Whether `a` and `b` are the same bytes (one buffer, not equal contents).
pub fn same(a: &SharedBytes, b: &SharedBytes) -> bool {
    a.as_ptr() == b.as_ptr() && a.len() == b.len()
}

impl PartialEq for BytesValues {
    fn eq(&self, other: &BytesValues) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for BytesValues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
    }
}

impl<'a> FromIterator<&'a [u8]> for BytesValues {
    fn from_iter<I: IntoIterator<Item = &'a [u8]>>(values: I) -> BytesValues {
        let mut out = BytesValues::new();
        for v in values {
            out.push(v);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_copied_long_mapped_ones_referenced() {
        let long = vec![7u8; REFERENCE_MIN];
        let mut record = b"ab".to_vec();
        record.extend_from_slice(&long);
        let path = crate::test_dir("example-bytes").join("record");
        std::fs::write(&path, &record).unwrap();
        // SAFETY: a file of this test's own, not changed while mapped.
        let map = SharedBytes::from_owner(
            unsafe { memmap2::Mmap::map(&std::fs::File::open(&path).unwrap()) }.unwrap(),
        );
        let mut values = BytesValues::new();
        values.push_from(&map[..2], &map, Home::Mapped(&map, 0));
        values.push_from(&map[2..], &map, Home::Mapped(&map, 0));
        values.push_from(&record[2..], &record, Home::Owned);
        assert_eq!(values.len(), 3);
        assert_eq!(values.get(0), b"ab");
        assert_eq!(values.get(1), &long[..]);
        assert_eq!(values.get(2), &long[..]);
        assert_eq!(values.referenced(), 1, "only the long mapped value");
        let (offsets, data) = values.to_offsets_and_data();
        assert_eq!(
            offsets,
            vec![0, 2, 2 + long.len() as u64, 2 + 2 * long.len() as u64]
        );
        assert_eq!(&data[2..2 + long.len()], &long[..]);
        let same: BytesValues = [&b"ab"[..], &long[..], &long[..]].into_iter().collect();
        assert_eq!(values, same);
        std::fs::remove_file(path).unwrap();
    }
}
