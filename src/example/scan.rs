//! Spec inference straight from `tf.train.Example` bytes, for `convert tfrecord`: the
//! same statistics [`SpecInference::add`] keeps from a decoded message, without building
//! one (decoding every record with prost and keying a map by a fresh `String` per
//! feature was 85% of a reshard).
//!
//! The scan takes the canonical encoding only: each field once where the message has
//! one, known fields, packed or unpacked lists, UTF-8 keys, every length inside its
//! message. Anything else ([`Scanned::Unusual`]: a map key given twice, a oneof set
//! twice, an unknown field, bytes that are not a message) goes to prost and
//! [`SpecInference::add`], so the two paths agree on every input, errors included
//! (tested against each other below and by the mutation run).

use std::collections::HashMap;

use crate::error::{Error, ErrorKind, Result};
use crate::example::schema::{FeatureKind, ShapeStat, SpecInference};

/// What the scan made of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scanned {
    /// Counted.
    Counted,
    /// Not counted: decode it and add it to a [`SpecInference`] instead.
    Unusual,
}

/// Per-feature statistics of the Examples scanned so far.
#[derive(Debug, Default)]
pub(crate) struct ExampleScan {
    records: u64,
    slots: Vec<Slot>,
    by_name: HashMap<Vec<u8>, usize>,
    /// The current record's features: (slot, kind and values; `None`: no list set).
    pending: Vec<(usize, Option<(FeatureKind, u64)>)>,
}

#[derive(Debug)]
struct Slot {
    name: String,
    /// The kind of the records counted (`None` before any).
    kind: Option<FeatureKind>,
    stat: ShapeStat,
    /// The record (1-based) that last had it: a second sighting in one record is a
    /// repeated map key.
    seen_in: u64,
}

/// A varint at `*pos`, or `None` when cut short or longer than 10 bytes.
#[inline(always)]
pub(crate) fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    // Tags and short lengths: one byte.
    let &first = buf.get(*pos)?;
    if first < 0x80 {
        *pos += 1;
        return Some(u64::from(first));
    }
    varint_long(buf, pos)
}

#[inline(never)]
fn varint_long(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *buf.get(*pos)?;
        *pos += 1;
        if shift == 63 && byte > 1 {
            return None;
        }
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}

/// A length-delimited field's bytes at `*pos` (after its tag).
#[inline(always)]
pub(crate) fn delimited<'a>(buf: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let len = usize::try_from(varint(buf, pos)?).ok()?;
    let end = pos.checked_add(len).filter(|&e| e <= buf.len())?;
    let out = &buf[*pos..end];
    *pos = end;
    Some(out)
}

/// The values of a `BytesList`, `FloatList` or `Int64List` message.
fn list_len(kind: FeatureKind, list: &[u8]) -> Option<u64> {
    let mut pos = 0;
    let mut n = 0u64;
    while pos < list.len() {
        let key = varint(list, &mut pos)?;
        match (kind, key) {
            // field 1, length-delimited: one bytes value, or a packed run.
            (FeatureKind::Bytes, 0x0a) => {
                delimited(list, &mut pos)?;
                n += 1;
            }
            (FeatureKind::Float, 0x0a) => {
                let run = delimited(list, &mut pos)?;
                if run.len() % 4 != 0 {
                    return None;
                }
                n += run.len() as u64 / 4;
            }
            (FeatureKind::Float, 0x0d) => {
                pos = pos.checked_add(4).filter(|&p| p <= list.len())?;
                n += 1;
            }
            (FeatureKind::Int64, 0x0a) => {
                let run = delimited(list, &mut pos)?;
                // A varint ends at each byte below 0x80, and a run ends on one.
                let ends = run.iter().filter(|&&b| b < 0x80).count();
                if run.last().is_some_and(|&b| b >= 0x80) {
                    return None;
                }
                if run.len() > ends {
                    // Some varint spans bytes: each must be at most 10 long.
                    let mut at = 0;
                    while at < run.len() {
                        varint(run, &mut at)?;
                    }
                }
                n += ends as u64;
            }
            (FeatureKind::Int64, 0x08) => {
                varint(list, &mut pos)?;
                n += 1;
            }
            _ => return None,
        }
    }
    Some(n)
}

/// Byte equality of two short names without a `memcmp` call per feature.
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

impl ExampleScan {
    /// No records yet.
    pub(crate) fn new() -> ExampleScan {
        ExampleScan::default()
    }

    /// Counts one serialized Example, or says it is [`Scanned::Unusual`] (then nothing
    /// of it was counted).
    ///
    /// # Errors
    ///
    /// A feature whose kind differs from an earlier record's.
    pub(crate) fn add(&mut self, payload: &[u8]) -> Result<Scanned> {
        self.pending.clear();
        if self.walk(payload).is_none() {
            return Ok(Scanned::Unusual);
        }
        let record = self.records + 1;
        for &(slot, counted) in &self.pending {
            let s = &mut self.slots[slot];
            // A key twice in one record: prost keeps the last; let it. (Slots marked
            // before the repeat stay marked with a record number that is never counted:
            // the next record has that number again, so the marks are cleared below.)
            if s.seen_in == record {
                self.unmark(record);
                return Ok(Scanned::Unusual);
            }
            s.seen_in = record;
            if let (Some(first), Some((kind, _))) = (s.kind, counted) {
                if first != kind {
                    return Err(Error::new(ErrorKind::KindConflict {
                        feature: s.name.clone(),
                        first: first.name(),
                        second: kind.name(),
                    }));
                }
            }
        }
        for &(slot, counted) in &self.pending {
            if let Some((kind, len)) = counted {
                let s = &mut self.slots[slot];
                s.kind = Some(kind);
                s.stat.add(len);
            }
        }
        self.records = record;
        Ok(Scanned::Counted)
    }

    /// Clears the marks of an uncounted record.
    fn unmark(&mut self, record: u64) {
        for &(slot, _) in &self.pending {
            if self.slots[slot].seen_in == record {
                self.slots[slot].seen_in = 0;
            }
        }
    }

    /// Walks an Example, noting its features in `pending`; `None` when unusual.
    fn walk(&mut self, payload: &[u8]) -> Option<()> {
        let mut pos = 0;
        let mut features = None;
        while pos < payload.len() {
            // Example { Features features = 1; }, once.
            if varint(payload, &mut pos)? != 0x0a || features.is_some() {
                return None;
            }
            features = Some(delimited(payload, &mut pos)?);
        }
        let features = features.unwrap_or_default();
        let mut pos = 0;
        while pos < features.len() {
            // Features { map<string, Feature> feature = 1; }: entries.
            if varint(features, &mut pos)? != 0x0a {
                return None;
            }
            let entry = delimited(features, &mut pos)?;
            let (mut key, mut value) = (None, None);
            let mut at = 0;
            while at < entry.len() {
                match varint(entry, &mut at)? {
                    0x0a if key.is_none() => key = Some(delimited(entry, &mut at)?),
                    0x12 if value.is_none() => value = Some(delimited(entry, &mut at)?),
                    _ => return None,
                }
            }
            let key = key.unwrap_or_default();
            // Feature { oneof kind { BytesList = 1; FloatList = 2; Int64List = 3; } }
            let value = value.unwrap_or_default();
            if value.is_empty() {
                // No list set: the inference skips such a feature (its key still counts
                // as given, once).
                let slot = self.slot(key)?;
                self.pending.push((slot, None));
                continue;
            }
            let mut at = 0;
            let (kind, list) = match varint(value, &mut at)? {
                0x0a => (FeatureKind::Bytes, delimited(value, &mut at)?),
                0x12 => (FeatureKind::Float, delimited(value, &mut at)?),
                0x1a => (FeatureKind::Int64, delimited(value, &mut at)?),
                _ => return None,
            };
            if at != value.len() {
                return None;
            }
            let len = list_len(kind, list)?;
            let slot = self.slot(key)?;
            self.pending.push((slot, Some((kind, len))));
        }
        Some(())
    }

    /// The slot of a feature name; `None` when it is not UTF-8 (prost refuses it).
    #[inline]
    fn slot(&mut self, key: &[u8]) -> Option<usize> {
        // Records usually list their features in one order: try the next slot first.
        let guess = self.pending.last().map_or(0, |&(s, _)| s + 1);
        if self
            .slots
            .get(guess)
            .is_some_and(|s| same(s.name.as_bytes(), key))
        {
            return Some(guess);
        }
        if let Some(&i) = self.by_name.get(key) {
            return Some(i);
        }
        let name = std::str::from_utf8(key).ok()?.to_owned();
        let i = self.slots.len();
        self.slots.push(Slot {
            name,
            kind: None,
            stat: ShapeStat::default(),
            seen_in: 0,
        });
        self.by_name.insert(key.to_vec(), i);
        Some(i)
    }

    /// Adds what the scan counted to `inference`.
    ///
    /// # Errors
    ///
    /// A feature whose kind differs between the two.
    pub(crate) fn finish_into(self, inference: &mut SpecInference) -> Result<()> {
        let features =
            (self.slots.iter()).filter_map(|s| Some((s.name.as_str(), s.kind?, &s.stat)));
        inference.absorb(self.records, features)
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::example::decode_record;
    use crate::example::proto::{
        BytesList, Example, Feature, Features, FloatList, Int64List, Kind,
    };
    use crate::example::RecordType;

    fn feature(kind: Kind) -> Feature {
        Feature { kind: Some(kind) }
    }

    fn example(features: Vec<(&str, Feature)>) -> Vec<u8> {
        Example {
            features: Some(Features {
                feature: features
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
            }),
        }
        .encode_to_vec()
    }

    /// The scan and prost + `SpecInference::add` give the same spec, or the scan hands
    /// the record over.
    fn both(records: &[Vec<u8>]) -> (Result<Vec<crate::example::FeatureSpec>>, u64) {
        let mut scan = ExampleScan::new();
        let mut slow = SpecInference::new();
        let mut unusual = 0;
        for r in records {
            match scan.add(r) {
                Ok(Scanned::Counted) => {}
                Ok(Scanned::Unusual) => {
                    unusual += 1;
                    let record = match decode_record(r, RecordType::Example) {
                        Ok(record) => record,
                        Err(e) => return (Err(e), unusual),
                    };
                    if let Err(e) = slow.add(&record) {
                        return (Err(e), unusual);
                    }
                }
                Err(e) => return (Err(e), unusual),
            }
        }
        let finished = scan.finish_into(&mut slow).map(|()| slow.finish());
        (finished, unusual)
    }

    fn prost_only(records: &[Vec<u8>]) -> Result<Vec<crate::example::FeatureSpec>> {
        let mut slow = SpecInference::new();
        for r in records {
            slow.add(&decode_record(r, RecordType::Example)?)?;
        }
        Ok(slow.finish())
    }

    #[test]
    fn the_scan_infers_what_the_decoded_records_give() {
        let records: Vec<Vec<u8>> = (0..50i64)
            .map(|i| {
                let mut f = vec![
                    (
                        "id",
                        feature(Kind::Int64List(Int64List { value: vec![i, -i] })),
                    ),
                    (
                        "x",
                        feature(Kind::FloatList(FloatList {
                            value: vec![0.5; 3],
                        })),
                    ),
                    (
                        "s",
                        feature(Kind::BytesList(BytesList {
                            value: vec![b"a".to_vec(); (i % 3) as usize],
                        })),
                    ),
                    ("empty", Feature { kind: None }),
                ];
                if i % 4 == 0 {
                    f.push((
                        "sometimes",
                        feature(Kind::Int64List(Int64List {
                            value: vec![1 << 40],
                        })),
                    ));
                }
                example(f)
            })
            .collect();
        let (scanned, unusual) = both(&records);
        assert_eq!(unusual, 0);
        assert_eq!(scanned.unwrap(), prost_only(&records).unwrap());
    }

    #[test]
    fn unusual_encodings_go_to_prost_and_agree() {
        let plain = example(vec![(
            "a",
            feature(Kind::Int64List(Int64List { value: vec![1, 2] })),
        )]);
        // Unpacked int64s and floats; a repeated map key; the oneof given twice; an
        // unknown field; a key that is not UTF-8; bytes that are no message; empty.
        let unpacked_ints = {
            let list = [0x08, 0x01, 0x08, 0x02];
            let feat = [&[0x1a, list.len() as u8][..], &list].concat();
            let entry = [&[0x0a, 1, b'a', 0x12, feat.len() as u8][..], &feat].concat();
            let feats = [&[0x0a, entry.len() as u8][..], &entry].concat();
            [&[0x0a, feats.len() as u8][..], &feats].concat()
        };
        let twice = {
            let entry = example(vec![(
                "a",
                feature(Kind::Int64List(Int64List { value: vec![1] })),
            )]);
            // Features' bytes twice: Example.features merged by prost, the key repeated.
            let inner = &entry[2..];
            let feats = [inner, inner].concat();
            [&[0x0a, feats.len() as u8][..], &feats].concat()
        };
        let unknown = [&plain[..], &[0x10, 0x01]].concat();
        let bad_key = {
            let entry = [0x0a, 1, 0xff, 0x12, 0];
            let feats = [&[0x0a, entry.len() as u8][..], &entry].concat();
            [&[0x0a, feats.len() as u8][..], &feats].concat()
        };
        for (name, records) in [
            ("unpacked", vec![unpacked_ints.clone(), plain.clone()]),
            ("twice", vec![twice, plain.clone()]),
            ("unknown", vec![unknown, plain.clone()]),
            ("bad key", vec![plain.clone(), bad_key]),
            ("garbage", vec![plain.clone(), vec![0xff, 0xff, 0x01]]),
            ("empty", vec![Vec::new(), plain.clone()]),
        ] {
            let (scanned, _) = both(&records);
            match (scanned, prost_only(&records)) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{name}"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{name}"),
                (a, b) => panic!("{name}: {a:?} vs {b:?}"),
            }
        }
        // Unpacked ints are counted by the scan itself.
        let mut scan = ExampleScan::new();
        assert_eq!(scan.add(&unpacked_ints).unwrap(), Scanned::Counted);
    }

    #[test]
    fn a_kind_conflict_is_an_error_at_its_record() {
        let a = example(vec![(
            "v",
            feature(Kind::Int64List(Int64List { value: vec![1] })),
        )]);
        let b = example(vec![(
            "v",
            feature(Kind::FloatList(FloatList { value: vec![1.0] })),
        )]);
        let mut scan = ExampleScan::new();
        assert_eq!(scan.add(&a).unwrap(), Scanned::Counted);
        let err = scan.add(&b).unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::KindConflict { .. }),
            "{err}"
        );
    }
}
