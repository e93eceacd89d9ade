//! Fixed-size lists without nulls, checked where their levels are encoded.
//!
//! The column an ML table is most often made of is a fixed-size list of numbers: an
//! embedding, a feature vector (the standard table's `x`, 32 floats a row). arrow-rs
//! decodes every element's repetition and definition level into a buffer, then walks
//! both buffers element by element to find where each list starts: about a fifth of
//! converting the standard table. When every list is present and full, the levels say
//! nothing the fixed size does not: the definition levels are all the maximum (one RLE
//! run per page, as writers encode them) and the repetition levels are one bit pattern
//! (a 0, then `size - 1` ones). [`FixedListReader`] checks exactly that, a run or 64
//! levels at a time where they are encoded, and copies PLAIN values as they are (or looks
//! dictionary indices up).
//!
//! It reads a column chunk page by page through parquet's own page reader (the same
//! decompression and page checks arrow-rs's reader does). Whatever it does not expect, it
//! does not decode: a null, an encoding other than PLAIN or dictionary, a list of another
//! length, a run arrow-rs's decoder would refuse, a V2 page that does not hold exactly the
//! whole lists it counts (arrow-rs skips V2 pages by that count when it takes over), a
//! value or page after the row group's last row, a page it cannot read. Then
//! [`FixedListReader::read`] answers `None`, and [`super::parquet::read_row_group`] reads
//! the rest of the row group with arrow-rs's reader. So what a file decodes to, and every
//! error, stays arrow-rs's. Memory grows with the values pages hold: the list size is the
//! footer's word, which nothing checks against the data.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, FixedSizeListArray, Float32Array, Float64Array, Int32Array, Int64Array,
};
use arrow_buffer::{Buffer, ScalarBuffer};
use arrow_schema::{DataType, FieldRef, Schema};
use bytes::Bytes;
use parquet::basic::{Encoding, Type as PhysicalType};
use parquet::column::page::{Page, PageReader};
use parquet::schema::types::SchemaDescriptor;

use crate::source::contain::contain;

/// What the fast path needs to know of one root column: a `FixedSizeList` of a
/// fixed-width number, stored as one Parquet leaf repeated once.
#[derive(Debug, Clone)]
pub(crate) struct FixedList {
    /// The leaf's index among the file's columns (its column chunk in a row group).
    pub leaf: usize,
    /// The list's element field, as arrow-rs reads the column (`FixedSizeList(child, size)`).
    child: FieldRef,
    /// Elements per list.
    size: usize,
    /// Bytes per element (4 or 8), as PLAIN stores them.
    width: usize,
    /// The leaf's definition level when its list is present and the element not null.
    max_def: u16,
}

/// The root column `root` of `schema` (read from `parquet`) if the fast path can read
/// it: a `FixedSizeList` of `Float32`, `Float64`, `Int32` or `Int64` (the Arrow types
/// that are their Parquet physical type unconverted), whose one leaf is repeated once.
pub(crate) fn fixed_list(
    schema: &Schema,
    parquet: &SchemaDescriptor,
    root: usize,
) -> Option<FixedList> {
    let data_type = schema.fields().get(root)?.data_type();
    let DataType::FixedSizeList(child, size) = data_type else {
        return None;
    };
    let size = usize::try_from(*size).ok().filter(|&s| s > 0)?;
    let (width, physical) = match child.data_type() {
        DataType::Float32 => (4, PhysicalType::FLOAT),
        DataType::Float64 => (8, PhysicalType::DOUBLE),
        DataType::Int32 => (4, PhysicalType::INT32),
        DataType::Int64 => (8, PhysicalType::INT64),
        _ => return None,
    };
    let mut leaves = (0..parquet.num_columns()).filter(|&l| parquet.get_column_root_idx(l) == root);
    let leaf = leaves.next()?;
    if leaves.next().is_some() {
        return None;
    }
    let column = parquet.column(leaf);
    if column.max_rep_level() != 1 || column.physical_type() != physical {
        return None;
    }
    Some(FixedList {
        leaf,
        child: child.clone(),
        size,
        width,
        max_def: u16::try_from(column.max_def_level())
            .ok()
            .filter(|&d| d > 0)?,
    })
}

/// Reads one column chunk of a [`FixedList`] column, rows in order; see the module docs.
pub(crate) struct FixedListReader {
    pages: Box<dyn PageReader>,
    column: FixedList,
    /// The dictionary page's values.
    dictionary: Option<Words>,
    /// The current data page's values not yet read.
    values: Values,
    /// Elements whose levels were checked so far: where the repetition pattern stands.
    elements: u64,
    /// Values the chunk declares (footer), and values read so far.
    chunk_values: u64,
    values_read: u64,
    /// Rows of the row group, and rows read so far.
    chunk_rows: u64,
    rows_read: u64,
}

/// Where the current page's values are read from.
enum Values {
    /// No page yet, or the last one is used up.
    None,
    /// PLAIN: `left` values from byte `at` of `page`.
    Plain { page: Bytes, at: usize, left: usize },
    /// Dictionary indices in the hybrid encoding, from byte `at` of `page`.
    Indices {
        page: Bytes,
        at: usize,
        left: usize,
        indices: Hybrid,
    },
}

impl FixedListReader {
    /// A reader of `column`'s chunk of a row group of `chunk_rows` rows, whose footer
    /// declares `chunk_values` values, and whose pages `pages` hands out.
    pub(crate) fn new(
        pages: Box<dyn PageReader>,
        column: FixedList,
        chunk_values: u64,
        chunk_rows: u64,
    ) -> FixedListReader {
        FixedListReader {
            pages,
            column,
            dictionary: None,
            values: Values::None,
            elements: 0,
            chunk_values,
            values_read: 0,
            chunk_rows,
            rows_read: 0,
        }
    }

    /// The next `rows` lists; `None` where arrow-rs's reader must take over (see the
    /// module docs). After `None` the reader is not to be used again.
    pub(crate) fn read(&mut self, rows: usize) -> Option<ArrayRef> {
        let size = self.column.size;
        let wanted = rows.checked_mul(size)?;
        // The size comes from the footer's Arrow schema, which nothing checks against the
        // data: more values than the chunk declares are not asked for, and memory grows
        // with the values pages really hold, never ahead of them.
        if self.values_read + wanted as u64 > self.chunk_values
            || self.rows_read + rows as u64 > self.chunk_rows
        {
            return None;
        }
        let mut out = Words::with_capacity(self.column.width, 0);
        let mut read = 0;
        while read < wanted {
            if self.values_left() == 0 {
                self.next_data_page()?;
                continue;
            }
            read += self.take_values(wanted - read, &mut out)?;
        }
        self.values_read += wanted as u64;
        self.rows_read += rows as u64;
        // The row group's last list ends with its chunk, as arrow-rs reads it: no value
        // and no page may follow.
        if self.rows_read == self.chunk_rows
            && (self.values_left() != 0
                || !matches!(contain(|| self.pages.peek_next_page()), Ok(Ok(None))))
        {
            return None;
        }
        let buffer = out.into_buffer();
        let values: ArrayRef = match self.column.child.data_type() {
            DataType::Float32 => Arc::new(Float32Array::new(
                ScalarBuffer::new(buffer, 0, wanted),
                None,
            )),
            DataType::Float64 => Arc::new(Float64Array::new(
                ScalarBuffer::new(buffer, 0, wanted),
                None,
            )),
            DataType::Int32 => {
                Arc::new(Int32Array::new(ScalarBuffer::new(buffer, 0, wanted), None))
            }
            DataType::Int64 => {
                Arc::new(Int64Array::new(ScalarBuffer::new(buffer, 0, wanted), None))
            }
            _ => return None,
        };
        let size = i32::try_from(size).ok()?;
        let list =
            FixedSizeListArray::try_new(self.column.child.clone(), size, values, None).ok()?;
        Some(Arc::new(list))
    }

    fn values_left(&self) -> usize {
        match &self.values {
            Values::None => 0,
            Values::Plain { left, .. } | Values::Indices { left, .. } => *left,
        }
    }

    /// Appends up to `wanted` of the current page's values to `out`; how many.
    fn take_values(&mut self, wanted: usize, out: &mut Words) -> Option<usize> {
        let width = self.column.width;
        match &mut self.values {
            Values::None => None,
            Values::Plain { page, at, left } => {
                let n = wanted.min(*left);
                out.reserve(n);
                let bytes = page.get(*at..*at + n * width)?;
                out.extend_le(bytes);
                *at += n * width;
                *left -= n;
                Some(n)
            }
            Values::Indices {
                page,
                at,
                left,
                indices,
            } => {
                let dictionary = self.dictionary.as_ref()?;
                out.reserve(wanted.min(*left));
                let n = indices.gather(page, at, wanted.min(*left), dictionary, out)?;
                *left -= n;
                Some(n)
            }
        }
    }

    /// Reads pages up to the next data page, checks its levels and makes its values
    /// current; `None` at the end of the chunk or where the fast path does not apply.
    fn next_data_page(&mut self) -> Option<()> {
        loop {
            let page = contain(|| self.pages.get_next_page()).ok()?.ok()??;
            let (buf, num_values, encoding, rep, def) = match page {
                Page::DictionaryPage {
                    buf,
                    num_values,
                    encoding,
                    ..
                } => {
                    let plain = matches!(encoding, Encoding::PLAIN | Encoding::PLAIN_DICTIONARY);
                    let bytes = usize::try_from(num_values)
                        .ok()?
                        .checked_mul(self.column.width)?;
                    if self.dictionary.is_some() || !plain || buf.len() < bytes {
                        return None;
                    }
                    let mut words =
                        Words::with_capacity(self.column.width, bytes / self.column.width);
                    words.extend_le(&buf[..bytes]);
                    self.dictionary = Some(words);
                    continue;
                }
                Page::DataPage {
                    buf,
                    num_values,
                    encoding,
                    def_level_encoding: Encoding::RLE,
                    rep_level_encoding: Encoding::RLE,
                    ..
                } => {
                    // V1: each level stream is a 4-byte little-endian length and its bytes.
                    let prefixed = |at: usize| -> Option<(usize, usize)> {
                        let len = buf.get(at..at + 4)?;
                        let len = u32::from_le_bytes(len.try_into().ok()?) as usize;
                        Some((at + 4, at + 4 + len))
                    };
                    let rep = prefixed(0)?;
                    let def = prefixed(rep.1)?;
                    (buf, num_values, encoding, rep, def)
                }
                Page::DataPageV2 {
                    buf,
                    num_values,
                    encoding,
                    num_nulls: 0,
                    num_rows,
                    def_levels_byte_len,
                    rep_levels_byte_len,
                    ..
                } => {
                    // A V2 page holds whole lists, `num_rows` of them: arrow-rs ends a
                    // list at a V2 page's start, and skips V2 pages by `num_rows` alone
                    // (as it does when it takes over from here), so both must be exact.
                    let size = self.column.size as u64;
                    if !self.elements.is_multiple_of(size)
                        || u64::from(num_values) != u64::from(num_rows) * size
                    {
                        return None;
                    }
                    let rep_end = rep_levels_byte_len as usize;
                    let def_end = rep_end.checked_add(def_levels_byte_len as usize)?;
                    (buf, num_values, encoding, (0, rep_end), (rep_end, def_end))
                }
                _ => return None,
            };
            let n = usize::try_from(num_values).ok()?;
            self.check_repetition(buf.get(rep.0..rep.1)?, n)?;
            check_definition(buf.get(def.0..def.1)?, n, self.column.max_def)?;
            let at = def.1;
            self.values = match encoding {
                Encoding::PLAIN => {
                    if buf.len() - at < n.checked_mul(self.column.width)? {
                        return None;
                    }
                    Values::Plain {
                        page: buf,
                        at,
                        left: n,
                    }
                }
                Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY => {
                    let bits = *buf.get(at)?;
                    if bits > 32 || self.dictionary.is_none() {
                        return None;
                    }
                    Values::Indices {
                        page: buf,
                        at: at + 1,
                        left: n,
                        indices: Hybrid::new(bits),
                    }
                }
                _ => return None,
            };
            return Some(());
        }
    }

    /// Checks `n` repetition levels (bit width 1): element `e` of the chunk must have
    /// level 0 where `e % size == 0` (a list starts) and 1 elsewhere.
    fn check_repetition(&mut self, levels: &[u8], n: usize) -> Option<()> {
        let size = self.column.size as u64;
        let mut runs = Runs::new(levels, 1);
        let mut left = n;
        while left > 0 {
            match runs.next()? {
                Run::Repeat { value, count } => {
                    let count = count.min(left);
                    let phase = self.elements % size;
                    let fits = match value {
                        0 => size == 1 || (count == 1 && phase == 0),
                        1 => phase != 0 && phase + count as u64 <= size,
                        _ => false,
                    };
                    if !fits {
                        return None;
                    }
                    self.elements += count as u64;
                    left -= count;
                }
                Run::Packed { bytes, count } => {
                    let count = count.min(left);
                    for start in (0..count).step_by(64) {
                        let k = (count - start).min(64);
                        let expected = repetition_bits(self.elements % size, size, k);
                        if bits_at(bytes, start / 8, k) != expected {
                            return None;
                        }
                        self.elements += k as u64;
                    }
                    left -= count;
                }
            }
        }
        Some(())
    }
}

/// Values of 4 or 8 bytes, collected in a `Vec` of their width (aligned for their Arrow
/// type) and handed to Arrow without a copy, as arrow-rs's reader does (a 64-byte
/// aligned `MutableBuffer` went through glibc's `memalign` and left the heap 4.5 MB
/// larger per decoding thread).
enum Words {
    W4(Vec<u32>),
    W8(Vec<u64>),
}

impl Words {
    /// Room for `additional` more values.
    fn reserve(&mut self, additional: usize) {
        match self {
            Words::W4(v) => v.reserve(additional),
            Words::W8(v) => v.reserve(additional),
        }
    }

    fn with_capacity(width: usize, values: usize) -> Words {
        if width == 4 {
            Words::W4(Vec::with_capacity(values))
        } else {
            Words::W8(Vec::with_capacity(values))
        }
    }

    /// Appends PLAIN values (little-endian, whole values).
    fn extend_le(&mut self, bytes: &[u8]) {
        fn extend<T: Default + Clone, const N: usize>(
            v: &mut Vec<T>,
            bytes: &[u8],
            from_le: fn([u8; N]) -> T,
        ) {
            let start = v.len();
            v.resize(start + bytes.len() / N, T::default());
            for (value, b) in v[start..].iter_mut().zip(bytes.chunks_exact(N)) {
                *value = from_le(b.try_into().unwrap_or([0; N]));
            }
        }
        match self {
            Words::W4(v) => extend(v, bytes, u32::from_le_bytes),
            Words::W8(v) => extend(v, bytes, u64::from_le_bytes),
        }
    }

    /// Appends dictionary entry `index`, `k` times.
    fn repeat(&mut self, dictionary: &Words, index: usize, k: usize) -> Option<()> {
        match (self, dictionary) {
            (Words::W4(v), Words::W4(d)) => v.extend(std::iter::repeat_n(*d.get(index)?, k)),
            (Words::W8(v), Words::W8(d)) => v.extend(std::iter::repeat_n(*d.get(index)?, k)),
            _ => return None,
        }
        Some(())
    }

    /// Appends the dictionary entries `indices` name.
    fn gather(&mut self, dictionary: &Words, indices: impl Iterator<Item = u64>) -> Option<()> {
        fn gather<T: Copy>(
            v: &mut Vec<T>,
            d: &[T],
            indices: impl Iterator<Item = u64>,
        ) -> Option<()> {
            for index in indices {
                v.push(*d.get(usize::try_from(index).ok()?)?);
            }
            Some(())
        }
        match (self, dictionary) {
            (Words::W4(v), Words::W4(d)) => gather(v, d, indices),
            (Words::W8(v), Words::W8(d)) => gather(v, d, indices),
            _ => None,
        }
    }

    fn into_buffer(self) -> Buffer {
        match self {
            Words::W4(v) => Buffer::from_vec(v),
            Words::W8(v) => Buffer::from_vec(v),
        }
    }
}

/// The `k` (≤ 64) repetition levels from an element at `phase` of its list, as the low
/// bits of a word: 1 for each element but a list's first.
fn repetition_bits(phase: u64, size: u64, k: usize) -> u64 {
    let mut word = if k == 64 { u64::MAX } else { (1u64 << k) - 1 };
    if size == 1 {
        return 0;
    }
    let mut first = (size - phase) % size;
    while first < k as u64 {
        word &= !(1u64 << first);
        first += size;
    }
    word
}

/// `k` (≤ 64) bits from byte `at` of `bytes`, as the low bits of a word (missing bytes
/// read as zeros; the caller compares with what it expects).
fn bits_at(bytes: &[u8], at: usize, k: usize) -> u64 {
    let word = match bytes.get(at..at + 8) {
        Some(eight) => u64::from_le_bytes(eight.try_into().unwrap_or_default()),
        None => {
            let have = bytes.get(at..).unwrap_or_default();
            have.iter()
                .rev()
                .fold(0u64, |word, &byte| (word << 8) | u64::from(byte))
        }
    };
    if k == 64 {
        word
    } else {
        word & ((1u64 << k) - 1)
    }
}

/// Checks that `n` definition levels are all `max` (every list present, no element
/// null).
fn check_definition(levels: &[u8], n: usize, max: u16) -> Option<()> {
    let width = bit_width(u64::from(max));
    let mut runs = Runs::new(levels, width);
    let mut left = n;
    while left > 0 {
        let count = match runs.next()? {
            Run::Repeat { value, count } => {
                let count = count.min(left);
                if value != u64::from(max) {
                    return None;
                }
                count
            }
            Run::Packed { bytes, count } => {
                let count = count.min(left);
                if (0..count).any(|i| unpack(bytes, i, width) != u64::from(max)) {
                    return None;
                }
                count
            }
        };
        left -= count;
    }
    Some(())
}

/// Bits needed for values up to `max`.
fn bit_width(max: u64) -> u8 {
    (64 - max.leading_zeros()) as u8
}

/// Value `i` of a bit-packed run of `width`-bit values (LSB first).
fn unpack(bytes: &[u8], i: usize, width: u8) -> u64 {
    let bit = i * usize::from(width);
    let word = bits_at(bytes, bit / 8, 64) >> (bit % 8);
    // width ≤ 32 and bit % 8 ≤ 7: the value lies within the 64 bits read.
    word & ((1u64 << width) - 1)
}

/// One run of the RLE / bit-packing hybrid encoding.
enum Run<'a> {
    /// `value`, `count` times.
    Repeat { value: u64, count: usize },
    /// `count` values (a multiple of 8) bit-packed in `bytes`.
    Packed { bytes: &'a [u8], count: usize },
}

/// The runs of a hybrid-encoded stream of `width`-bit values. A stream that ends
/// mid-run or is malformed just ends: the caller wanted a number of values and finds
/// fewer.
struct Runs<'a> {
    data: &'a [u8],
    at: usize,
    width: u8,
}

impl<'a> Runs<'a> {
    fn new(data: &'a [u8], width: u8) -> Runs<'a> {
        Runs { data, at: 0, width }
    }

    /// The next run; `None` at the end, and where arrow-rs's decoder stops or fails: a
    /// zero header, a run over `i32::MAX` values, a repeated value wider than the width.
    fn next(&mut self) -> Option<Run<'a>> {
        let header = uleb128(self.data, &mut self.at)?;
        let groups = usize::try_from(header >> 1).ok()?;
        let count = if header & 1 == 1 {
            groups.checked_mul(8)?
        } else {
            groups
        };
        if header == 0 || count > i32::MAX as usize {
            return None;
        }
        if header & 1 == 1 {
            let len = groups.checked_mul(usize::from(self.width))?;
            let bytes = self.data.get(self.at..self.at.checked_add(len)?)?;
            self.at += len;
            Some(Run::Packed { bytes, count })
        } else {
            let len = usize::from(self.width).div_ceil(8);
            let bytes = self.data.get(self.at..self.at + len)?;
            self.at += len;
            let mut value = [0u8; 8];
            value[..len].copy_from_slice(bytes);
            let value = u64::from_le_bytes(value);
            if self.width < 64 && value >> self.width != 0 {
                return None;
            }
            Some(Run::Repeat {
                value,
                count: groups,
            })
        }
    }
}

/// An unsigned LEB128 varint of at most 5 bytes (a run header is a u32).
fn uleb128(data: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..35).step_by(7) {
        let byte = *data.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Dictionary indices in the hybrid encoding, read across calls (a page outlives a
/// batch): where the current run stands.
struct Hybrid {
    width: u8,
    run: HybridRun,
}

enum HybridRun {
    Done,
    Repeat {
        value: u64,
        left: usize,
    },
    /// Values `next..count` of the bit-packed bytes `start..start + len` of the page.
    Packed {
        start: usize,
        len: usize,
        next: usize,
        count: usize,
    },
}

impl Hybrid {
    fn new(width: u8) -> Hybrid {
        Hybrid {
            width,
            run: HybridRun::Done,
        }
    }

    /// Appends the entries of `dictionary` that the next `wanted` indices name (run
    /// headers read from byte `*at` of `page` on); `None` for an index out of range or
    /// a stream that ends first.
    fn gather(
        &mut self,
        page: &[u8],
        at: &mut usize,
        wanted: usize,
        dictionary: &Words,
        out: &mut Words,
    ) -> Option<usize> {
        let mut done = 0;
        while done < wanted {
            match &mut self.run {
                HybridRun::Repeat { value, left } if *left > 0 => {
                    let k = (*left).min(wanted - done);
                    out.repeat(dictionary, usize::try_from(*value).ok()?, k)?;
                    *left -= k;
                    done += k;
                }
                HybridRun::Packed {
                    start,
                    len,
                    next,
                    count,
                } if *next < *count => {
                    let k = (*count - *next).min(wanted - done);
                    let bytes = page.get(*start..*start + *len)?;
                    out.gather(
                        dictionary,
                        (*next..*next + k).map(|i| unpack(bytes, i, self.width)),
                    )?;
                    *next += k;
                    done += k;
                }
                _ => {
                    let mut runs = Runs {
                        data: page,
                        at: *at,
                        width: self.width,
                    };
                    self.run = match runs.next()? {
                        Run::Repeat { value, count } => HybridRun::Repeat { value, left: count },
                        Run::Packed { bytes, count } => HybridRun::Packed {
                            start: runs.at - bytes.len(),
                            len: bytes.len(),
                            next: 0,
                            count,
                        },
                    };
                    *at = runs.at;
                }
            }
        }
        Some(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hybrid-encodes `levels` of bit width 1 as writers do: bit-packed groups of 8
    /// (`packed`), or one RLE run per value change.
    fn encode(levels: &[u8], packed: bool) -> Vec<u8> {
        fn header(out: &mut Vec<u8>, mut value: usize) {
            while value >= 0x80 {
                out.push((value as u8) | 0x80);
                value >>= 7;
            }
            out.push(value as u8);
        }
        let mut out = Vec::new();
        if packed {
            let groups = levels.len().div_ceil(8);
            header(&mut out, (groups << 1) | 1);
            for group in levels.chunks(8) {
                out.push(
                    group
                        .iter()
                        .enumerate()
                        .fold(0u8, |b, (i, &l)| b | (l << i)),
                );
            }
        } else {
            for run in levels.chunk_by(|a, b| a == b) {
                header(&mut out, run.len() << 1);
                out.push(run[0]);
            }
        }
        out
    }

    /// Pages handed out in order, then the end of the chunk.
    struct Pages(std::collections::VecDeque<Page>);

    impl Iterator for Pages {
        type Item = parquet::errors::Result<Page>;
        fn next(&mut self) -> Option<Self::Item> {
            self.0.pop_front().map(Ok)
        }
    }

    impl PageReader for Pages {
        fn get_next_page(&mut self) -> parquet::errors::Result<Option<Page>> {
            Ok(self.0.pop_front())
        }
        fn peek_next_page(
            &mut self,
        ) -> parquet::errors::Result<Option<parquet::column::page::PageMetadata>> {
            Ok(self.0.front().map(|_| parquet::column::page::PageMetadata {
                num_rows: None,
                num_levels: None,
                is_dict: false,
            }))
        }
        fn skip_next_page(&mut self) -> parquet::errors::Result<()> {
            self.0.pop_front();
            Ok(())
        }
    }

    /// A reader of a `FixedSizeList<Float32>[size]` chunk of `rows` rows made of `pages`.
    fn reader_of(size: usize, rows: u64, pages: Vec<Page>) -> FixedListReader {
        let child = Arc::new(arrow_schema::Field::new("element", DataType::Float32, true));
        let column = FixedList {
            leaf: 0,
            child,
            size,
            width: 4,
            max_def: 3,
        };
        let values = rows * size as u64;
        FixedListReader::new(Box::new(Pages(pages.into())), column, values, rows)
    }

    fn reader(size: usize) -> FixedListReader {
        reader_of(size, u64::MAX / 1024, Vec::new())
    }

    /// A page of float `values` (element `from` of the chunk on), its levels those of
    /// full lists of `size`; V2 pages say they hold `rows` rows.
    fn page(v2: Option<u32>, size: usize, from: usize, values: &[f32]) -> Page {
        let n = values.len();
        let rep = encode(&pattern(size, from, n), true);
        let mut def = Vec::new();
        let mut run = n << 1;
        while run >= 0x80 {
            def.push((run as u8) | 0x80);
            run >>= 7;
        }
        def.extend([run as u8, 3]);
        let plain: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        match v2 {
            None => {
                let mut buf = Vec::new();
                for levels in [&rep, &def] {
                    buf.extend((levels.len() as u32).to_le_bytes());
                    buf.extend(levels);
                }
                buf.extend(plain);
                Page::DataPage {
                    buf: buf.into(),
                    num_values: n as u32,
                    encoding: Encoding::PLAIN,
                    def_level_encoding: Encoding::RLE,
                    rep_level_encoding: Encoding::RLE,
                    statistics: None,
                }
            }
            Some(rows) => Page::DataPageV2 {
                buf: [rep.clone(), def.clone(), plain].concat().into(),
                num_values: n as u32,
                encoding: Encoding::PLAIN,
                num_nulls: 0,
                num_rows: rows,
                def_levels_byte_len: def.len() as u32,
                rep_levels_byte_len: rep.len() as u32,
                is_compressed: false,
                statistics: None,
            },
        }
    }

    fn floats(a: &ArrayRef) -> Vec<f32> {
        let list = a.as_any().downcast_ref::<FixedSizeListArray>().unwrap();
        let values = list
            .values()
            .as_any()
            .downcast_ref::<Float32Array>()
            .unwrap();
        values.values().to_vec()
    }

    /// V1 pages may end inside a list; V2 pages hold whole lists, as many as they say
    /// (arrow-rs skips them by that count when it takes over).
    #[test]
    fn v2_pages_must_hold_the_whole_lists_they_count() {
        let v: Vec<f32> = (0..12).map(|i| i as f32).collect();
        // V1: 6 values then 6, lists of 4 across the boundary.
        let mut r = reader_of(
            4,
            3,
            vec![page(None, 4, 0, &v[..6]), page(None, 4, 6, &v[6..])],
        );
        assert_eq!(floats(&r.read(3).unwrap()), v);
        // V2: 8 values as 2 rows, then 4 as 1.
        let mut r = reader_of(
            4,
            3,
            vec![page(Some(2), 4, 0, &v[..8]), page(Some(1), 4, 8, &v[8..])],
        );
        assert_eq!(floats(&r.read(3).unwrap()), v);
        // A V2 page starting inside a list, or counting other rows, is handed over.
        let mut r = reader_of(
            4,
            3,
            vec![page(Some(1), 4, 0, &v[..6]), page(Some(1), 4, 6, &v[6..])],
        );
        assert!(r.read(3).is_none(), "starts inside a list");
        let mut r = reader_of(
            4,
            3,
            vec![page(Some(3), 4, 0, &v[..8]), page(Some(1), 4, 8, &v[8..])],
        );
        assert!(r.read(3).is_none(), "says 3 rows, holds 2");
    }

    /// The last row of a row group ends its chunk: a value or a page after it is
    /// handed over (arrow-rs reads on and fails).
    #[test]
    fn the_chunk_ends_with_the_row_groups_last_row() {
        let v: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let mut r = reader_of(
            4,
            2,
            vec![page(None, 4, 0, &v[..8]), page(None, 4, 8, &v[8..])],
        );
        assert!(r.read(2).is_none(), "a page follows");
        let mut r = reader_of(4, 2, vec![page(None, 4, 0, &v)]);
        assert!(r.read(2).is_none(), "values follow");
        let mut r = reader_of(4, 3, vec![page(None, 4, 0, &v)]);
        assert_eq!(floats(&r.read(2).unwrap()), v[..8]);
        assert_eq!(floats(&r.read(1).unwrap()), v[8..]);
    }

    /// The list size comes from the footer's Arrow schema: a read of more values than
    /// the chunk declares is handed over before anything is allocated for it.
    #[test]
    fn no_read_asks_for_more_than_the_chunk_declares() {
        let mut r = reader_of(i32::MAX as usize, 8192, Vec::new());
        r.chunk_values = 3 * 8192;
        assert!(r.read(8192).is_none());
        assert!(
            reader_of(4, 2, Vec::new()).read(3).is_none(),
            "more rows than the group"
        );
    }

    /// Repetition levels of `lists` lists of `size`, starting `phase` elements into one.
    fn pattern(size: usize, from: usize, n: usize) -> Vec<u8> {
        (from..from + n).map(|e| u8::from(e % size != 0)).collect()
    }

    #[test]
    fn repetition_levels_must_follow_the_fixed_size_across_pages() {
        for size in [1, 2, 3, 8, 32, 65, 100] {
            for packed in [false, true] {
                let mut r = reader(size);
                // Pages that end inside a list: the pattern goes on where it stopped.
                let mut at = 0;
                for n in [5, 64, 1, 130, 7, size * 3] {
                    let levels = encode(&pattern(size, at, n), packed);
                    assert_eq!(
                        r.check_repetition(&levels, n),
                        Some(()),
                        "size {size} at {at}"
                    );
                    at += n;
                }
                assert_eq!(r.elements, at as u64);
                // From a list's start: a list too long (the second starts late), or one
                // too short (the second starts early), is refused.
                let start = at.next_multiple_of(size);
                let mut long = pattern(size, start, 3 * size);
                long[size] = 1;
                let mut short = pattern(size, start, 3 * size);
                short[size - 1] = 0;
                for bad in [long, short] {
                    let (mut r2, n) = (reader(size), bad.len());
                    r2.elements = start as u64;
                    let expect = if size == 1 && bad.iter().all(|&l| l == 0) {
                        Some(())
                    } else {
                        None
                    };
                    assert_eq!(
                        r2.check_repetition(&encode(&bad, packed), n),
                        expect,
                        "size {size}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_bit_packed_run_padded_past_the_page_is_read_to_the_page_only() {
        let mut r = reader(3);
        // 5 levels in one group of 8: the 3 padding bits are anything.
        let levels = [0b1111_0110u8 | 0b1110_0000];
        assert_eq!(r.check_repetition(&[0x03, levels[0]], 5), Some(()));
        assert_eq!(r.elements, 5);
        // Fewer levels than the page promises: refused.
        assert_eq!(reader(3).check_repetition(&[0x03, levels[0]], 9), None);
    }

    #[test]
    fn definition_levels_must_all_be_the_maximum() {
        // RLE: 1000 times 3 (width 2).
        let rle = [0xd0, 0x0f, 3];
        assert_eq!(check_definition(&rle, 1000, 3), Some(()));
        assert_eq!(check_definition(&rle, 1001, 3), None, "runs out");
        assert_eq!(check_definition(&rle, 1000, 2), None, "another level");
        // Bit-packed, width 2: 8 values of 3 are 0xff 0xff; one 2 among them is refused.
        assert_eq!(check_definition(&[0x03, 0xff, 0xff], 8, 3), Some(()));
        assert_eq!(check_definition(&[0x03, 0xff, 0xbf], 8, 3), None);
        // ... unless it is padding past the page's levels.
        assert_eq!(check_definition(&[0x03, 0xff, 0xbf], 7, 3), Some(()));
    }

    #[test]
    fn malformed_runs_end_the_stream() {
        // Where arrow-rs's decoder stops or fails: a zero header, a run of 2^31 values, a
        // repeated value wider than the bit width.
        assert!(Runs::new(&[0x00, 0x02, 0x01], 1).next().is_none());
        assert!(Runs::new(&[0x80, 0x80, 0x80, 0x80, 0x10, 1], 1)
            .next()
            .is_none());
        assert!(Runs::new(&[0x81, 0x80, 0x80, 0x80, 0x02], 1)
            .next()
            .is_none());
        assert!(Runs::new(&[0x08, 0x02], 1).next().is_none());
        assert!(Runs::new(&[0x08, 0x02], 2).next().is_some());
        // A header of more than 5 bytes, a run whose bytes are missing.
        assert!(Runs::new(&[0xff; 6], 1).next().is_none());
        assert!(
            Runs::new(&[0x05, 0xff], 1).next().is_none(),
            "2 groups, 1 byte"
        );
        assert!(
            Runs::new(&[0x04], 2).next().is_none(),
            "a repeat without its value"
        );
        assert_eq!(
            bits_at(&[0xab, 0xcd], 0, 64),
            0xcdab,
            "short reads are zero-padded"
        );
        assert_eq!(bits_at(&[0xab], 3, 64), 0);
    }

    #[test]
    fn dictionary_indices_are_gathered_across_batches() {
        let dictionary = Words::W4(vec![10, 11, 12, 13, 14]);
        // width 3: RLE 4 x index 2, then 8 bit-packed indices 0..=4,4,3,1.
        let indices = [0u64, 1, 2, 3, 4, 4, 3, 1];
        let packed = indices
            .iter()
            .enumerate()
            .fold(0u32, |w, (i, &v)| w | ((v as u32) << (3 * i)))
            .to_le_bytes();
        let page = [0x08, 2, 0x03, packed[0], packed[1], packed[2]];
        let mut hybrid = Hybrid::new(3);
        let (mut at, mut out) = (0, Words::W4(Vec::new()));
        for wanted in [3, 5, 4] {
            assert_eq!(
                hybrid.gather(&page, &mut at, wanted, &dictionary, &mut out),
                Some(wanted)
            );
        }
        let Words::W4(values) = &out else {
            unreachable!()
        };
        assert_eq!(values, &[12, 12, 12, 12, 10, 11, 12, 13, 14, 14, 13, 11]);
        assert_eq!(
            hybrid.gather(&page, &mut at, 1, &dictionary, &mut out),
            None,
            "ends"
        );
        // An index past the dictionary is refused.
        let page = [0x02, 5];
        let mut hybrid = Hybrid::new(3);
        assert_eq!(
            hybrid.gather(&page, &mut 0, 1, &dictionary, &mut Words::W4(Vec::new())),
            None
        );
    }

    #[test]
    fn repetition_words_mark_each_list_start() {
        assert_eq!(repetition_bits(0, 3, 7), 0b011_0110);
        assert_eq!(repetition_bits(1, 3, 7), 0b101_1011);
        assert_eq!(repetition_bits(0, 1, 64), 0);
        assert_eq!(repetition_bits(5, 100, 64), u64::MAX);
        assert_eq!(
            repetition_bits(99, 100, 64),
            u64::MAX - 2,
            "element 100 starts a list"
        );
    }
}
