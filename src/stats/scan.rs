//! Counting serialized records without decoding them into messages: the conversion counts
//! every record it writes, so this is the path that must cost little.
//!
//! [`Partial::add_payload`] walks an Example's bytes once to find its features and check
//! them (each key once, known fields, well-formed lists), then counts their values
//! straight from the bytes. Anything unusual (a key given twice, an unknown field, a
//! SequenceExample) is decoded by prost and counted by [`Partial::add`], so both paths
//! count the same (tested against each other below); a payload prost cannot decode
//! either is counted as [`Partial::undecodable`].

use prost::Message;

use super::partial::{Partial, Pending};
use crate::error::Result;
use crate::example::proto::{Example, SequenceExample};
use crate::example::scan::{delimited, varint};
use crate::example::schema::FeatureKind;
use crate::example::{Record, RecordType};

/// Checks a list message's fields, without counting.
fn well_formed(kind: FeatureKind, list: &[u8]) -> Option<()> {
    let mut pos = 0;
    while pos < list.len() {
        match (kind, varint(list, &mut pos)?) {
            (FeatureKind::Bytes, 0x0a) => {
                delimited(list, &mut pos)?;
            }
            (FeatureKind::Float, 0x0a) => {
                if delimited(list, &mut pos)?.len() % 4 != 0 {
                    return None;
                }
            }
            (FeatureKind::Float, 0x0d) => {
                pos = pos.checked_add(4).filter(|&p| p <= list.len())?;
            }
            (FeatureKind::Int64, 0x0a) => {
                let run = delimited(list, &mut pos)?;
                if run.last().is_some_and(|&b| b >= 0x80) {
                    return None;
                }
                if run.iter().any(|&b| b >= 0x80) {
                    let mut at = 0;
                    while at < run.len() {
                        varint(run, &mut at)?;
                    }
                }
            }
            (FeatureKind::Int64, 0x08) => {
                varint(list, &mut pos)?;
            }
            _ => return None,
        }
    }
    Some(())
}

/// A well-formed list's numbers, appended to `out` (int64 as f64, floats widened).
fn numbers(kind: FeatureKind, list: &[u8], out: &mut Vec<f64>) {
    let mut pos = 0;
    while pos < list.len() {
        let Some(key) = varint(list, &mut pos) else {
            return;
        };
        match (kind, key) {
            (FeatureKind::Float, 0x0a) => {
                let Some(run) = delimited(list, &mut pos) else {
                    return;
                };
                out.extend(
                    run.chunks_exact(4)
                        .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
                );
            }
            (FeatureKind::Float, _) => {
                let c = &list[pos..pos + 4];
                out.push(f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
                pos += 4;
            }
            (_, 0x0a) => {
                let Some(run) = delimited(list, &mut pos) else {
                    return;
                };
                let mut at = 0;
                while let Some(v) = (at < run.len()).then(|| varint(run, &mut at)).flatten() {
                    out.push(v as i64 as f64);
                }
            }
            _ => {
                if let Some(v) = varint(list, &mut pos) {
                    out.push(v as i64 as f64);
                }
            }
        }
    }
}

impl Partial {
    /// Counts one serialized record of `record_type` (a payload that is not one counts
    /// as [`Partial::undecodable`]).
    ///
    /// # Errors
    ///
    /// A feature whose kind differs from the one counted before.
    pub fn add_payload(&mut self, payload: &[u8], record_type: RecordType) -> Result<()> {
        if record_type == RecordType::Example {
            let mut pending = std::mem::take(&mut self.pending);
            pending.clear();
            let scanned = walk(payload, &mut pending).is_some();
            let counted = if scanned {
                self.count_scanned(payload, &mut pending)
            } else {
                Ok(false)
            };
            self.pending = pending;
            if counted? {
                return Ok(());
            }
            return match Example::decode(payload) {
                Ok(e) => self.add(&Record::Example(e)),
                Err(_) => {
                    self.undecodable += 1;
                    Ok(())
                }
            };
        }
        if record_type == RecordType::Bytes {
            // Opaque payloads: counted, never parsed.
            self.records += 1;
            return Ok(());
        }
        match SequenceExample::decode(payload) {
            Ok(s) => self.add(&Record::SequenceExample(s)),
            Err(_) => {
                self.undecodable += 1;
                Ok(())
            }
        }
    }

    /// Counts the features `walk` found; `false` (nothing counted) when a key repeats.
    fn count_scanned(&mut self, payload: &[u8], pending: &mut [Pending]) -> Result<bool> {
        // Slots: the next one after the last first (records list features in one
        // order), else by name; new names only once the record is known to count.
        let mut guess = 0;
        for p in pending.iter_mut() {
            let name = &payload[p.name.0..p.name.1];
            p.slot = match self.features.get(guess) {
                Some(f) if f.name.as_bytes() == name => guess,
                _ => self.slot_of(name).unwrap_or(usize::MAX),
            };
            guess = p.slot.wrapping_add(1);
        }
        self.stamp += 1;
        for p in pending.iter() {
            if p.slot == usize::MAX {
                continue;
            }
            let f = &mut self.features[p.slot];
            if f.seen == self.stamp {
                return Ok(false);
            }
            f.seen = self.stamp;
        }
        // New names, each once (a repeated new key is unusual too).
        for i in 0..pending.len() {
            if pending[i].slot != usize::MAX {
                continue;
            }
            let name = &payload[pending[i].name.0..pending[i].name.1];
            if pending[i + 1..]
                .iter()
                .any(|q| q.slot == usize::MAX && &payload[q.name.0..q.name.1] == name)
            {
                return Ok(false);
            }
        }
        for p in pending.iter() {
            if p.slot != usize::MAX {
                self.features[p.slot].check_kind_only(p.kind)?;
            }
        }
        for p in pending.iter_mut() {
            if p.slot == usize::MAX {
                let name =
                    std::str::from_utf8(&payload[p.name.0..p.name.1]).expect("checked by walk");
                p.slot = self.slot(name);
                self.features[p.slot].seen = self.stamp;
            }
        }
        let mut values = std::mem::take(&mut self.values);
        for p in pending.iter() {
            let f = &mut self.features[p.slot];
            f.check_kind(p.kind)?;
            let Some(kind) = p.kind else { continue };
            let list = &payload[p.list.0..p.list.1];
            f.present += 1;
            if kind == FeatureKind::Bytes {
                let (mut pos, mut n) = (0, 0u64);
                while pos < list.len() {
                    pos += 1; // the tag, 0x0a: checked by walk
                    let Some(v) = delimited(list, &mut pos) else {
                        break;
                    };
                    f.strings.add(v);
                    n += 1;
                }
                f.lengths.add(n);
            } else {
                values.clear();
                numbers(kind, list, &mut values);
                f.lengths.add(values.len() as u64);
                f.numbers.add_slice(&values);
            }
        }
        self.values = values;
        self.records += 1;
        Ok(true)
    }
}

/// A length-delimited field's span at `*pos` (after its tag), within `limit`.
#[inline(always)]
fn span(buf: &[u8], pos: &mut usize, limit: usize) -> Option<(usize, usize)> {
    let len = usize::try_from(varint(&buf[..limit], pos)?).ok()?;
    let end = pos.checked_add(len).filter(|&e| e <= limit)?;
    let out = (*pos, end);
    *pos = end;
    Some(out)
}

/// Walks an Example, noting its features in `pending`; `None` when unusual.
fn walk(payload: &[u8], pending: &mut Vec<Pending>) -> Option<()> {
    let end = payload.len();
    let mut pos = 0;
    let mut features = None;
    while pos < end {
        // Example { Features features = 1; }, once.
        if varint(payload, &mut pos)? != 0x0a || features.is_some() {
            return None;
        }
        features = Some(span(payload, &mut pos, end)?);
    }
    let Some((mut pos, end)) = features else {
        return Some(());
    };
    while pos < end {
        // Features { map<string, Feature> feature = 1; }: entries.
        if varint(&payload[..end], &mut pos)? != 0x0a {
            return None;
        }
        let (mut at, entry_end) = span(payload, &mut pos, end)?;
        let (mut key, mut value) = (None, None);
        while at < entry_end {
            let tag = varint(&payload[..entry_end], &mut at)?;
            let field = span(payload, &mut at, entry_end)?;
            match tag {
                0x0a if key.is_none() => key = Some(field),
                0x12 if value.is_none() => value = Some(field),
                _ => return None,
            }
        }
        let name = key.unwrap_or((at, at));
        std::str::from_utf8(&payload[name.0..name.1]).ok()?;
        let (mut at, value_end) = value.unwrap_or((at, at));
        if at == value_end {
            pending.push(Pending {
                slot: usize::MAX,
                name,
                kind: None,
                list: (0, 0),
            });
            continue;
        }
        // Feature { oneof kind { BytesList = 1; FloatList = 2; Int64List = 3; } }, once.
        let kind = match varint(&payload[..value_end], &mut at)? {
            0x0a => FeatureKind::Bytes,
            0x12 => FeatureKind::Float,
            0x1a => FeatureKind::Int64,
            _ => return None,
        };
        let list = span(payload, &mut at, value_end)?;
        if at != value_end {
            return None;
        }
        well_formed(kind, &payload[list.0..list.1])?;
        pending.push(Pending {
            slot: usize::MAX,
            name,
            kind: Some(kind),
            list,
        });
    }
    Some(())
}

/// Records for tests: ints, floats (some NaN), strings (every value distinct, a few
/// frequent), a feature present in some.
#[cfg(test)]
pub(crate) mod tests_support {
    use crate::example::proto::{
        BytesList, Example, Feature, Features, FloatList, Int64List, Kind,
    };
    use prost::Message;

    pub(crate) fn records(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                let mut feature = std::collections::BTreeMap::new();
                let f = |kind| Feature { kind: Some(kind) };
                feature.insert(
                    "i".to_owned(),
                    f(Kind::Int64List(Int64List {
                        value: vec![i as i64 % 13, -(i as i64)],
                    })),
                );
                let x = if i % 97 == 0 {
                    f32::NAN
                } else {
                    (i as f32).sin()
                };
                feature.insert(
                    "x".to_owned(),
                    f(Kind::FloatList(FloatList { value: vec![x; 3] })),
                );
                let s = if i % 5 == 0 {
                    "frequent".to_owned()
                } else {
                    format!("s{i}")
                };
                feature.insert(
                    "s".to_owned(),
                    f(Kind::BytesList(BytesList {
                        value: vec![s.into_bytes()],
                    })),
                );
                if i % 3 == 0 {
                    feature.insert("sometimes".to_owned(), Feature { kind: None });
                }
                Example {
                    features: Some(Features { feature }),
                }
                .encode_to_vec()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::proto::{BytesList, Feature, Features, FloatList, Int64List, Kind};
    use proptest::prelude::*;

    fn feature() -> impl Strategy<Value = Feature> {
        prop_oneof![
            Just(Feature { kind: None }),
            prop::collection::vec(any::<i64>().prop_map(|v| v % 1000), 0..5).prop_map(|value| {
                Feature {
                    kind: Some(Kind::Int64List(Int64List { value })),
                }
            }),
            prop::collection::vec(-3.0f32..3.0, 0..5).prop_map(|value| Feature {
                kind: Some(Kind::FloatList(FloatList { value }))
            }),
            prop::collection::vec(prop::collection::vec(97u8..100, 0..3), 0..4).prop_map(|value| {
                Feature {
                    kind: Some(Kind::BytesList(BytesList { value })),
                }
            }),
        ]
    }

    /// A record of features named by their kind (so kinds never conflict), some absent.
    fn record() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec((0usize..4, feature()), 0..5).prop_map(|fs| {
            let feature = fs
                .into_iter()
                .map(|(i, f)| {
                    let kind = match &f.kind {
                        None => "n",
                        Some(Kind::Int64List(_)) => "i",
                        Some(Kind::FloatList(_)) => "f",
                        Some(Kind::BytesList(_)) => "b",
                    };
                    (format!("{kind}{i}"), f)
                })
                .collect();
            Example {
                features: Some(Features { feature }),
            }
            .encode_to_vec()
        })
    }

    /// Counted by decoding each record, up to the first error (a kind conflict).
    fn by_prost(records: &[Vec<u8>]) -> (Partial, Option<String>) {
        let mut p = Partial::new();
        for r in records {
            match Example::decode(r.as_slice()) {
                Ok(e) => {
                    if let Err(e) = p.add(&Record::Example(e)) {
                        return (p, Some(e.to_string()));
                    }
                }
                Err(_) => p.undecodable += 1,
            }
        }
        (p, None)
    }

    fn by_scan(records: &[Vec<u8>]) -> (Partial, Option<String>) {
        let mut p = Partial::new();
        for r in records {
            if let Err(e) = p.add_payload(r, RecordType::Example) {
                return (p, Some(e.to_string()));
            }
        }
        (p, None)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256)
        ))]

        /// The scan counts what decoding counts, on records as writers make them and on
        /// records with a byte changed, cut or repeated (unusual, or not a message).
        #[test]
        fn the_scan_counts_what_decoding_counts(
            mut records in prop::collection::vec(record(), 1..20),
            damage in prop::collection::vec((any::<usize>(), any::<usize>(), any::<u8>(), 0u8..3), 0..4),
        ) {
            for (r, at, byte, how) in damage {
                let n = records.len();
                let rec = &mut records[r % n];
                if rec.is_empty() {
                    continue;
                }
                let at = at % rec.len();
                match how {
                    0 => rec[at] = byte,
                    1 => rec.truncate(at),
                    _ => {
                        let copy = rec.clone();
                        rec.extend_from_slice(&copy);
                    }
                }
            }
            let (scanned, e1) = by_scan(&records);
            let (decoded, e2) = by_prost(&records);
            prop_assert_eq!(scanned.records, decoded.records);
            if e1.is_some() || e2.is_some() {
                // An error stops both at the same record (what it counted of the failed
                // record before the error may differ).
                prop_assert_eq!(e1, e2);
                return Ok(());
            }
            prop_assert_eq!(scanned.undecodable, decoded.undecodable);
            prop_assert_eq!(scanned.to_proto(), decoded.to_proto());
        }
    }
}
