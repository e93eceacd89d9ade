//! A cached batch ([`Chunk`]): a parsed batch's arrays laid out back to back in one
//! allocation of 64-bit words, each array from a word boundary so that it can be viewed
//! as its own type. One block per batch, not one per array: the memory cache holds
//! tens of thousands of chunks, and blocks that live as long as the cache, scattered
//! among the short-lived blocks of batches of the same sizes, kept the allocator's
//! pages from being reused (the process held 1.33x the cache; one block per chunk
//! leaves ~1.1x). The cache file stores the same words, so reading a chunk back is one
//! copy and a check of its layout, with no decoding.

use std::sync::Arc;

use crate::example::columnar::{Column, Values};
use crate::example::{FeatureKind, FeatureSpec, Part};
use crate::pipeline::Batch;

/// An array within a chunk's words: the word it starts at, its element count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    word: usize,
    len: usize,
}

/// Where a column's arrays are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    kind: FeatureKind,
    /// `u64 × (rows + 1)`: variable-length columns and feature lists.
    row_splits: Option<Span>,
    /// `u64 × (steps + 1)`: feature lists.
    step_splits: Option<Span>,
    /// `i64`, `f32`, or for bytes the data (`u8`).
    values: Span,
    /// Bytes columns: `len + 1` offsets into the data, `u32` (or `u64` when `wide`).
    offsets: Option<Span>,
    wide: bool,
}

/// A cached batch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Chunk {
    rows: usize,
    words: Vec<u64>,
    /// Framed bytes of the records it holds, for the throughput figures: a row counts
    /// an equal share ([`Chunk::record_bytes`]), so an epoch's total is exact.
    record_bytes: u64,
    columns: Box<[Layout]>,
}

fn words_for(len: usize, width: usize) -> usize {
    (len * width).div_ceil(8)
}

/// Appends arrays to words being built (sized beforehand: no reallocation).
struct Builder {
    words: Vec<u64>,
}

impl Builder {
    fn push(&mut self, bytes: &[u8], len: usize) -> Span {
        let word = self.words.len();
        self.words.resize(word + bytes.len().div_ceil(8), 0);
        as_bytes_mut(&mut self.words[word..])[..bytes.len()].copy_from_slice(bytes);
        Span { word, len }
    }

    fn u64s(&mut self, v: &[u64]) -> Span {
        self.push(as_bytes(v), v.len())
    }
}

fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: the element types used here (u64, i64, u32, f32) have no padding; any
    // initialized value is a valid sequence of bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

fn as_bytes_mut(v: &mut [u64]) -> &mut [u8] {
    // SAFETY: every byte pattern is a valid u64, so writing bytes cannot break one.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 8) }
}

impl Chunk {
    /// A parsed batch's columns, copied out (bytes referenced in mapped shards too).
    pub(crate) fn from_batch(batch: &Batch) -> Chunk {
        let bytes_data: Vec<Option<(Vec<u64>, Vec<u8>)>> = batch
            .columns
            .iter()
            .map(|c| match &c.values {
                Values::Bytes(v) => Some(v.to_offsets_and_data()),
                _ => None,
            })
            .collect();
        let mut total = 0;
        for (c, data) in batch.columns.iter().zip(&bytes_data) {
            total += c.row_splits.as_ref().map_or(0, Vec::len);
            total += c.step_splits.as_ref().map_or(0, Vec::len);
            total += match (&c.values, data) {
                (Values::Int64(v), _) => v.len(),
                (Values::Float(v), _) => words_for(v.len(), 4),
                (Values::Bytes(_), Some((offsets, data))) => {
                    words_for(offsets.len(), 4 * (1 + usize::from(wide(offsets))))
                        + words_for(data.len(), 1)
                }
                (Values::Bytes(_), None) => unreachable!("made above"),
            };
        }
        let mut b = Builder {
            words: Vec::with_capacity(total),
        };
        let columns = batch
            .columns
            .iter()
            .zip(bytes_data)
            .map(|(c, data)| {
                let row_splits = c.row_splits.as_deref().map(|s| b.u64s(s));
                let step_splits = c.step_splits.as_deref().map(|s| b.u64s(s));
                let (kind, values, offsets, is_wide) = match (&c.values, data) {
                    (Values::Int64(v), _) => (
                        FeatureKind::Int64,
                        b.push(as_bytes(v), v.len()),
                        None,
                        false,
                    ),
                    (Values::Float(v), _) => (
                        FeatureKind::Float,
                        b.push(as_bytes(v), v.len()),
                        None,
                        false,
                    ),
                    (Values::Bytes(_), Some((offsets, data))) => {
                        let is_wide = wide(&offsets);
                        let o = if is_wide {
                            b.u64s(&offsets)
                        } else {
                            let narrow: Vec<u32> = offsets.iter().map(|&o| o as u32).collect();
                            b.push(as_bytes(&narrow), narrow.len())
                        };
                        (
                            FeatureKind::Bytes,
                            b.push(&data, data.len()),
                            Some(o),
                            is_wide,
                        )
                    }
                    (Values::Bytes(_), None) => unreachable!("made above"),
                };
                Layout {
                    kind,
                    row_splits,
                    step_splits,
                    values,
                    offsets,
                    wide: is_wide,
                }
            })
            .collect();
        debug_assert_eq!(b.words.len(), total);
        Chunk {
            rows: batch.rows,
            words: b.words,
            record_bytes: batch.record_bytes,
            columns,
        }
    }

    /// Bytes allocated for it.
    pub(crate) fn held_bytes(&self) -> u64 {
        (8 * self.words.capacity() + std::mem::size_of_val(&*self.columns)) as u64
    }

    /// Rows in it.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    fn u64s(&self, s: Span) -> &[u64] {
        &self.words[s.word..s.word + s.len]
    }

    fn u32s(&self, s: Span) -> &[u32] {
        let words = &self.words[s.word..s.word + words_for(s.len, 4)];
        // SAFETY: within the words (checked by the slice above), aligned (u64 alignment
        // covers u32), every bit pattern a valid u32.
        unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u32>(), s.len) }
    }

    fn i64s(&self, s: Span) -> &[i64] {
        let words = self.u64s(s);
        // SAFETY: the same bytes as u64s, every bit pattern a valid i64.
        unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<i64>(), s.len) }
    }

    fn f32s(&self, s: Span) -> &[f32] {
        let words = &self.words[s.word..s.word + words_for(s.len, 4)];
        // SAFETY: as in u32s; every bit pattern is a valid f32.
        unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<f32>(), s.len) }
    }

    fn data(&self, s: Span) -> &[u8] {
        &as_bytes(&self.words[s.word..s.word + words_for(s.len, 1)])[..s.len]
    }

    /// Row `row`'s share of the records' bytes: the shares of a chunk's rows add up to
    /// its total.
    fn record_bytes(&self, row: usize) -> u64 {
        let rows = self.rows.max(1) as u64;
        self.record_bytes / rows + u64::from((row as u64) < self.record_bytes % rows)
    }

    /// Offset `i` of a bytes column.
    #[inline]
    fn offset(&self, l: &Layout, i: usize) -> usize {
        let o = l.offsets.expect("a bytes column");
        if l.wide {
            self.u64s(o)[i] as usize
        } else {
            self.u32s(o)[i] as usize
        }
    }

    /// Values (for bytes: values, not data bytes) in a column.
    fn value_count(&self, l: &Layout) -> usize {
        match l.offsets {
            Some(o) => o.len - 1,
            None => l.values.len,
        }
    }

    /// The payload of its record in a cache file: `rows, words, record bytes, columns`
    /// as u64s, then per column `kind, flags (1 row splits, 2 step
    /// splits, 4 offsets, 8 wide offsets)` and four (word, len) spans (row splits, step
    /// splits, values, offsets; zeros when absent), all u64 little-endian; then the
    /// words, as they lie in memory.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let mut put = |v: u64| out.extend_from_slice(&v.to_le_bytes());
        put(self.rows as u64);
        put(self.words.len() as u64);
        put(self.record_bytes);
        put(self.columns.len() as u64);
        for l in self.columns.iter() {
            put(l.kind as u64);
            let flags = u64::from(l.row_splits.is_some())
                | u64::from(l.step_splits.is_some()) << 1
                | u64::from(l.offsets.is_some()) << 2
                | u64::from(l.wide) << 3;
            put(flags);
            for s in [l.row_splits, l.step_splits, Some(l.values), l.offsets] {
                let s = s.unwrap_or_default();
                put(s.word as u64);
                put(s.len as u64);
            }
        }
        out.extend_from_slice(as_bytes(&self.words));
    }

    /// Reads a payload back, checking every span, split and offset against the spec and
    /// the words there are (a cache file is input: nothing in it may make us panic or
    /// allocate for bytes that are not there).
    pub(crate) fn decode(bytes: &[u8], spec: &[FeatureSpec]) -> Result<Chunk, String> {
        let mut pos = 0;
        let mut get = || -> Result<usize, String> {
            let b = bytes.get(pos..pos + 8).ok_or("cut short")?;
            pos += 8;
            usize::try_from(u64::from_le_bytes(b.try_into().expect("8 bytes")))
                .map_err(|_| "a length beyond memory".to_owned())
        };
        let rows = get()?;
        if rows > u32::MAX as usize {
            return Err(format!("{rows} rows"));
        }
        let n_words = get()?;
        let record_bytes = get()? as u64;
        if get()? != spec.len() {
            return Err(format!("its columns are not the spec's {}", spec.len()));
        }
        let mut columns = Vec::with_capacity(spec.len());
        for _ in spec {
            let kind = get()?;
            let flags = get()?;
            let mut spans = [Span::default(); 4];
            for s in &mut spans {
                *s = Span {
                    word: get()?,
                    len: get()?,
                };
            }
            let kind = match kind {
                0 => FeatureKind::Int64,
                1 => FeatureKind::Float,
                2 => FeatureKind::Bytes,
                k => return Err(format!("kind {k}")),
            };
            let has = |bit: usize| flags & (1 << bit) != 0;
            columns.push(Layout {
                kind,
                row_splits: has(0).then_some(spans[0]),
                step_splits: has(1).then_some(spans[1]),
                values: spans[2],
                offsets: has(2).then_some(spans[3]),
                wide: has(3),
            });
        }
        let body = &bytes[pos..];
        if n_words.checked_mul(8) != Some(body.len()) {
            return Err(format!(
                "{} bytes of words, {n_words} words said",
                body.len()
            ));
        }
        let words: Vec<u64> = body
            .chunks_exact(8)
            .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
            .collect();
        let chunk = Chunk {
            rows,
            words,
            record_bytes,
            columns: columns.into_boxed_slice(),
        };
        chunk.check(spec)?;
        Ok(chunk)
    }

    /// Every span inside the words, every array as the spec says.
    fn check(&self, spec: &[FeatureSpec]) -> Result<(), String> {
        let fits = |s: Span, width: usize| {
            s.len
                .checked_mul(width)
                .and_then(|b| s.word.checked_add(b.div_ceil(8)))
                .is_some_and(|end| end <= self.words.len())
        };
        let ordered = |splits: &[u64], last: usize| {
            splits.first() == Some(&0)
                && splits.windows(2).all(|w| w[0] <= w[1])
                && splits.last() == Some(&(last as u64))
        };
        for (f, l) in spec.iter().zip(self.columns.iter()) {
            let bad = |what: &str| Err(format!("column {:?}: {what}", f.name));
            let list = f.part == Some(Part::FeatureLists);
            if l.kind != f.kind
                || l.row_splits.is_some() != (f.shape.is_none() || list)
                || l.step_splits.is_some() != list
                || l.offsets.is_some() != (f.kind == FeatureKind::Bytes)
            {
                return bad("not laid out as the spec says");
            }
            let width = match f.kind {
                FeatureKind::Int64 => 8,
                FeatureKind::Float => 4,
                FeatureKind::Bytes => 1,
            };
            if !fits(l.values, width) {
                return bad("values out of place");
            }
            if let Some(o) = l.offsets {
                if o.len == 0 || !fits(o, if l.wide { 8 } else { 4 }) {
                    return bad("offsets out of place");
                }
                let offsets: Vec<u64> = (0..o.len).map(|i| self.offset(l, i) as u64).collect();
                if !ordered(&offsets, l.values.len) {
                    return bad("offsets out of order");
                }
            }
            let values = self.value_count(l);
            match (l.row_splits, l.step_splits) {
                (Some(rows), Some(steps)) => {
                    if rows.len != self.rows + 1 || !fits(rows, 8) || !fits(steps, 8) {
                        return bad("splits out of place");
                    }
                    let (r, s) = (self.u64s(rows), self.u64s(steps));
                    if steps.len == 0 || !ordered(r, steps.len - 1) || !ordered(s, values) {
                        return bad("splits out of order");
                    }
                }
                (Some(rows), None) => {
                    if rows.len != self.rows + 1 || !fits(rows, 8) {
                        return bad("row splits out of place");
                    }
                    if !ordered(self.u64s(rows), values) {
                        return bad("row splits out of order");
                    }
                }
                (None, _) => {
                    let per_row: u64 = f.shape.as_deref().unwrap_or(&[]).iter().product();
                    if per_row.checked_mul(self.rows as u64) != Some(values as u64) {
                        return bad(&format!("{values} values"));
                    }
                }
            }
        }
        Ok(())
    }
}

fn wide(offsets: &[u64]) -> bool {
    offsets.last().is_some_and(|&end| end > u64::from(u32::MAX))
}

/// Rows of a batch to gather from cached chunks: the chunks they lie in and, per row,
/// (index into `chunks`, row within that chunk).
#[derive(Debug, Default)]
pub(crate) struct CachedRows {
    pub chunks: Vec<Arc<Chunk>>,
    pub rows: Vec<(u32, u32)>,
}

impl CachedRows {
    /// Bytes of its slots (the chunks themselves are the cache's).
    pub(crate) fn slot_bytes(&self) -> u64 {
        8 * (self.chunks.capacity() + self.rows.capacity()) as u64
    }
}

/// Copies the rows into `columns` (the empty columns of a batch, in spec order);
/// returns the framed bytes of the records they came from. Each column is sized once,
/// then filled.
pub(crate) fn gather(spec: &[FeatureSpec], rows: &CachedRows, columns: &mut [Column]) -> u64 {
    let mut ranges: Vec<std::ops::Range<usize>> = Vec::with_capacity(rows.rows.len());
    for (c, (f, out)) in spec.iter().zip(columns.iter_mut()).enumerate() {
        let per_row = f
            .shape
            .as_ref()
            .map_or(0, |s| s.iter().product::<u64>() as usize);
        let at = |chunk: u32| {
            let ch = &rows.chunks[chunk as usize];
            (ch, &ch.columns[c])
        };
        ranges.clear();
        ranges.extend(rows.rows.iter().map(|&(chunk, row)| {
            let (ch, l) = at(chunk);
            let row = row as usize;
            match (l.row_splits, l.step_splits) {
                (Some(r), Some(s)) => {
                    let (r, s) = (ch.u64s(r), ch.u64s(s));
                    s[r[row] as usize] as usize..s[r[row + 1] as usize] as usize
                }
                (Some(r), None) => {
                    let r = ch.u64s(r);
                    r[row] as usize..r[row + 1] as usize
                }
                (None, _) => row * per_row..(row + 1) * per_row,
            }
        }));
        let count: usize = ranges.iter().map(|r| r.len()).sum();
        // Shuffled rows lie far apart, each a cache miss: the row `AHEAD` on is asked of
        // memory while this one is copied.
        const AHEAD: usize = 8;
        let ahead = |k: usize, width: usize| {
            if let (Some(&(chunk, _)), Some(range)) =
                (rows.rows.get(k + AHEAD), ranges.get(k + AHEAD))
            {
                let (ch, l) = at(chunk);
                let words = ch.words.get(l.values.word..).unwrap_or(&[]);
                let bytes = range.start * width..range.end * width;
                for byte in bytes.step_by(64) {
                    if let Some(word) = words.get(byte / 8) {
                        crate::tfrecord::frame::prefetch(word);
                    }
                }
            }
        };
        match &mut out.values {
            Values::Int64(o) => {
                o.reserve_exact(count);
                for (k, (&(chunk, _), range)) in rows.rows.iter().zip(&ranges).enumerate() {
                    ahead(k, 8);
                    let (ch, l) = at(chunk);
                    o.extend_from_slice(&ch.i64s(l.values)[range.clone()]);
                }
            }
            Values::Float(o) => {
                o.reserve_exact(count);
                for (k, (&(chunk, _), range)) in rows.rows.iter().zip(&ranges).enumerate() {
                    ahead(k, 4);
                    let (ch, l) = at(chunk);
                    o.extend_from_slice(&ch.f32s(l.values)[range.clone()]);
                }
            }
            Values::Bytes(o) => {
                let data: usize = rows
                    .rows
                    .iter()
                    .zip(&ranges)
                    .map(|(&(chunk, _), r)| {
                        let (ch, l) = at(chunk);
                        ch.offset(l, r.end) - ch.offset(l, r.start)
                    })
                    .sum();
                o.reserve(count, data);
                for (&(chunk, _), range) in rows.rows.iter().zip(&ranges) {
                    let (ch, l) = at(chunk);
                    let bytes = ch.data(l.values);
                    for i in range.clone() {
                        o.push(&bytes[ch.offset(l, i)..ch.offset(l, i + 1)]);
                    }
                }
            }
        }
        if let Some(out_steps) = &mut out.step_splits {
            // Two levels: each row's steps, their ends moved to where its values land.
            let out_rows = out.row_splits.as_mut().expect("a list has row splits");
            let mut base = 0u64;
            for &(chunk, row) in &rows.rows {
                let (ch, l) = at(chunk);
                let (Some(r), Some(s)) = (l.row_splits, l.step_splits) else {
                    unreachable!("chunks are checked against the spec")
                };
                let (r, s) = (ch.u64s(r), ch.u64s(s));
                let (s0, s1) = (r[row as usize] as usize, r[row as usize + 1] as usize);
                let first = s[s0];
                out_steps.extend(s[s0 + 1..=s1].iter().map(|&end| base + end - first));
                base += s[s1] - first;
                out_rows.push(out_steps.len() as u64 - 1);
            }
            continue;
        }
        if let Some(splits) = &mut out.row_splits {
            splits.reserve_exact(ranges.len());
            let mut end = 0u64;
            splits.extend(ranges.iter().map(|r| {
                end += r.len() as u64;
                end
            }));
        }
    }
    rows.rows
        .iter()
        .map(|&(chunk, row)| rows.chunks[chunk as usize].record_bytes(row as usize))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::columnar::Decoder;

    fn spec() -> Vec<FeatureSpec> {
        let f = FeatureSpec::new;
        vec![
            f("x", FeatureKind::Float, Some(vec![2])),
            f("y", FeatureKind::Int64, Some(vec![])),
            f("tags", FeatureKind::Bytes, None),
        ]
    }

    /// A batch of `rows` rows whose values derive from `base`.
    fn batch(base: i64, rows: usize) -> Batch {
        let spec = spec();
        let mut columns = Decoder::new(&spec).unwrap().start();
        let cols = columns.columns_mut();
        for r in 0..rows as i64 {
            let v = base + r;
            let Values::Float(x) = &mut cols[0].values else {
                panic!()
            };
            x.extend([v as f32, -(v as f32)]);
            let Values::Int64(y) = &mut cols[1].values else {
                panic!()
            };
            y.push(v);
            let Values::Bytes(t) = &mut cols[2].values else {
                panic!()
            };
            for k in 0..(v % 3) {
                t.push(format!("t{v}-{k}").as_bytes());
            }
            let n = t.len() as u64;
            cols[2].row_splits.as_mut().unwrap().push(n);
        }
        columns.finish(0, rows, 20 * rows as u64)
    }

    #[test]
    fn a_chunk_round_trips_and_gathers_rows_exactly() {
        let spec = spec();
        let b = batch(10, 5);
        let chunk = Chunk::from_batch(&b);
        let mut bytes = Vec::new();
        chunk.encode(&mut bytes);
        assert_eq!(Chunk::decode(&bytes, &spec).unwrap(), chunk);
        // Every prefix is refused, never a panic.
        for cut in 0..bytes.len() {
            assert!(Chunk::decode(&bytes[..cut], &spec).is_err(), "cut at {cut}");
        }
        // Gathering rows in any order gives the rows of a batch made in that order.
        let chunks = vec![Arc::new(chunk), Arc::new(Chunk::from_batch(&batch(100, 3)))];
        let rows = CachedRows {
            chunks,
            rows: vec![(1, 2), (0, 4), (0, 0), (1, 0)],
        };
        let mut columns = Decoder::new(&spec).unwrap().start();
        let bytes = gather(&spec, &rows, columns.columns_mut());
        let got = columns.finish(0, 4, bytes);
        let mut want = Decoder::new(&spec).unwrap().start();
        for (base, _) in [(102, 0), (14, 0), (10, 0), (100, 0)] {
            let one = batch(base, 1);
            for (w, o) in want.columns_mut().iter_mut().zip(one.columns) {
                match (&mut w.values, o.values) {
                    (Values::Float(a), Values::Float(b)) => a.extend(b),
                    (Values::Int64(a), Values::Int64(b)) => a.extend(b),
                    (Values::Bytes(a), Values::Bytes(b)) => b.iter().for_each(|v| a.push(v)),
                    _ => unreachable!(),
                }
                if let Some(s) = &mut w.row_splits {
                    s.push(w.values.len() as u64);
                }
            }
        }
        assert_eq!(got, want.finish(0, 4, 4 * 20));
    }

    #[test]
    fn a_chunk_that_does_not_fit_the_spec_is_refused() {
        let mut bytes = Vec::new();
        Chunk::from_batch(&batch(0, 4)).encode(&mut bytes);
        let mut other = spec();
        other[1].kind = FeatureKind::Float;
        assert!(Chunk::decode(&bytes, &other).is_err());
        other = spec();
        other[0].shape = Some(vec![3]);
        assert!(Chunk::decode(&bytes, &other).is_err());
    }

    #[test]
    fn a_flipped_layout_word_is_refused_never_a_panic() {
        let spec = spec();
        let mut bytes = Vec::new();
        Chunk::from_batch(&batch(3, 6)).encode(&mut bytes);
        // Every byte of the layout, flipped in turn.
        let layout = 8 * (4 + 10 * spec.len());
        for at in 0..layout {
            let mut b = bytes.clone();
            b[at] ^= 0x40;
            let _ = Chunk::decode(&b, &spec);
        }
    }
}
