//! The fast Arrow encoder against prost: arbitrary batches, byte-identical records.
//! Also every Arrow → Feature mapping rule that Parquet cannot carry (views, REE,
//! list views) and the error rules.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::builder::*;
use arrow_array::types::Int32Type;
use arrow_array::*;
use arrow_buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields, Schema};
use proptest::prelude::*;
use prost::Message;

use tfshard::example::encode::{EncodeOptions, EncodePlan, EncodedBatch};
use tfshard::example::proto::{Example, Feature, Features};
use tfshard::example::RecordType;
use tfshard::tfrecord::RecordReader;

#[derive(Debug, Clone)]
struct Row {
    a: Option<i64>,
    b: i32,
    c: u8,
    d: bool,
    e: f32,
    f: Option<f64>,
    g: Option<String>,
    h: Vec<u8>,
    i: Option<Vec<i64>>,
    j: [f32; 3],
    k: Option<Vec<String>>,
    s: Option<(Option<i32>, String)>,
    dict: Option<u8>,
}

fn row() -> impl Strategy<Value = Row> {
    (
        (
            any::<Option<i64>>(),
            any::<i32>(),
            any::<u8>(),
            any::<bool>(),
            any::<f32>().prop_filter("NaN", |v| !v.is_nan()),
            prop::option::of(-1e30f64..1e30),
            prop::option::of("[a-zé ]{0,8}"),
        ),
        (
            prop::collection::vec(any::<u8>(), 0..6),
            prop::option::of(prop::collection::vec(any::<i64>(), 0..5)),
            [-1e6f32..1e6, -1e6f32..1e6, -1e6f32..1e6],
            prop::option::of(prop::collection::vec("[a-z]{0,4}", 0..4)),
            prop::option::of((any::<Option<i32>>(), "[xy]{0,3}")),
            prop::option::of(0u8..3),
        ),
    )
        .prop_map(|((a, b, c, d, e, f, g), (h, i, j, k, s, dict))| Row {
            a,
            b,
            c,
            d,
            e,
            f,
            g,
            h,
            i,
            j,
            k,
            s,
            dict,
        })
}

const WORDS: [&str; 3] = ["cat", "dog", ""];

fn batch(rows: &[Row]) -> RecordBatch {
    let a = Int64Array::from(rows.iter().map(|r| r.a).collect::<Vec<_>>());
    let b = Int32Array::from(rows.iter().map(|r| r.b).collect::<Vec<_>>());
    let c = UInt8Array::from(rows.iter().map(|r| r.c).collect::<Vec<_>>());
    let d = BooleanArray::from(rows.iter().map(|r| r.d).collect::<Vec<_>>());
    let e = Float32Array::from(rows.iter().map(|r| r.e).collect::<Vec<_>>());
    let f = Float64Array::from(rows.iter().map(|r| r.f).collect::<Vec<_>>());
    let g = StringArray::from(rows.iter().map(|r| r.g.clone()).collect::<Vec<_>>());
    let h = LargeBinaryArray::from(rows.iter().map(|r| r.h.as_slice()).collect::<Vec<_>>());
    let mut i = ListBuilder::new(Int64Builder::new());
    for r in rows {
        match &r.i {
            Some(v) => i.append_value(v.iter().map(|x| Some(*x))),
            None => i.append_null(),
        }
    }
    let mut j = FixedSizeListBuilder::new(Float32Builder::new(), 3);
    for r in rows {
        j.values().append_slice(&r.j);
        j.append(true);
    }
    // One-element fixed-size lists: in a sliced batch their values start past 0.
    let mut l = FixedSizeListBuilder::new(Int64Builder::new(), 1);
    let mut m = FixedSizeListBuilder::new(BinaryBuilder::new(), 1);
    for r in rows {
        l.values().append_value(r.b as i64);
        l.append(true);
        m.values().append_value(&r.h);
        m.append(true);
    }
    let mut k = LargeListBuilder::new(StringBuilder::new());
    for r in rows {
        match &r.k {
            Some(v) => k.append_value(v.iter().map(Some)),
            None => k.append_null(),
        }
    }
    let sx = Int32Array::from(
        rows.iter()
            .map(|r| r.s.as_ref().and_then(|s| s.0))
            .collect::<Vec<_>>(),
    );
    let sy = StringArray::from(
        rows.iter()
            .map(|r| r.s.as_ref().map(|s| s.1.clone()).unwrap_or_default())
            .collect::<Vec<_>>(),
    );
    let s_nulls = NullBuffer::from(rows.iter().map(|r| r.s.is_some()).collect::<Vec<_>>());
    let s = StructArray::new(
        Fields::from(vec![
            Field::new("x", DataType::Int32, true),
            Field::new("y", DataType::Utf8, false),
        ]),
        vec![Arc::new(sx) as ArrayRef, Arc::new(sy)],
        Some(s_nulls),
    );
    let dict: DictionaryArray<Int32Type> = rows
        .iter()
        .map(|r| r.dict.map(|w| WORDS[w as usize]))
        .collect();
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("a", Arc::new(a)),
        ("b", Arc::new(b)),
        ("c", Arc::new(c)),
        ("d", Arc::new(d)),
        ("e", Arc::new(e)),
        ("f", Arc::new(f)),
        ("g", Arc::new(g)),
        ("h", Arc::new(h)),
        ("i", Arc::new(i.finish())),
        ("j", Arc::new(j.finish())),
        ("k", Arc::new(k.finish())),
        ("l", Arc::new(l.finish())),
        ("m", Arc::new(m.finish())),
        ("s", Arc::new(s)),
        ("dict", Arc::new(dict)),
    ];
    RecordBatch::try_from_iter(columns).unwrap()
}

fn expected(r: &Row) -> Example {
    let mut m = BTreeMap::new();
    if let Some(a) = r.a {
        m.insert("a".to_owned(), Feature::int64(vec![a]));
    }
    m.insert("b".into(), Feature::int64(vec![r.b as i64]));
    m.insert("c".into(), Feature::int64(vec![r.c as i64]));
    m.insert("d".into(), Feature::int64(vec![r.d as i64]));
    m.insert("e".into(), Feature::float(vec![r.e]));
    if let Some(f) = r.f {
        m.insert("f".into(), Feature::float(vec![f as f32]));
    }
    if let Some(g) = &r.g {
        m.insert("g".into(), Feature::bytes(vec![g.as_bytes().to_vec()]));
    }
    m.insert("h".into(), Feature::bytes(vec![r.h.clone()]));
    if let Some(i) = &r.i {
        m.insert("i".into(), Feature::int64(i.clone()));
    }
    m.insert("j".into(), Feature::float(r.j.to_vec()));
    if let Some(k) = &r.k {
        m.insert(
            "k".into(),
            Feature::bytes(k.iter().map(|s| s.as_bytes().to_vec()).collect()),
        );
    }
    m.insert("l".into(), Feature::int64(vec![r.b as i64]));
    m.insert("m".into(), Feature::bytes(vec![r.h.clone()]));
    if let Some((x, y)) = &r.s {
        if let Some(x) = x {
            m.insert("s/x".into(), Feature::int64(vec![*x as i64]));
        }
        m.insert("s/y".into(), Feature::bytes(vec![y.as_bytes().to_vec()]));
    }
    if let Some(w) = r.dict {
        m.insert(
            "dict".into(),
            Feature::bytes(vec![WORDS[w as usize].as_bytes().to_vec()]),
        );
    }
    Example {
        features: Some(Features { feature: m }),
    }
}

fn encode(batch: &RecordBatch, options: &EncodeOptions) -> tfshard::Result<Vec<Vec<u8>>> {
    let plan = EncodePlan::new(&batch.schema(), options)?;
    let mut out = EncodedBatch::default();
    let mut stats = plan.new_stats();
    // Twice into one buffer: a batch appended after others frames (and checksums) its
    // records where they land.
    plan.encode_batch(batch, &mut out, &mut stats)?;
    plan.encode_batch(batch, &mut out, &mut stats)?;
    let mut reader = RecordReader::new(&out.data[..]);
    let mut records = Vec::new();
    while let Some(r) = reader.read_record()? {
        records.push(r.to_vec());
    }
    assert_eq!(records.len(), 2 * batch.num_rows());
    let second = records.split_off(batch.num_rows());
    assert_eq!(records, second);
    Ok(records)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn fast_encoder_equals_prost(rows in prop::collection::vec(row(), 0..40), offset in 0usize..5) {
        let full = batch(&rows);
        // A sliced batch exercises array offsets.
        let offset = offset.min(rows.len());
        let sliced = full.slice(offset, rows.len() - offset);
        let records = encode(&sliced, &EncodeOptions::default()).unwrap();
        for (record, row) in records.iter().zip(&rows[offset..]) {
            prop_assert_eq!(record, &expected(row).encode_to_vec());
        }
    }
}

fn one_column(name: &str, array: ArrayRef) -> RecordBatch {
    RecordBatch::try_from_iter(vec![(name, array)]).unwrap()
}

fn decoded(batch: &RecordBatch) -> Vec<Example> {
    encode(batch, &EncodeOptions::default())
        .unwrap()
        .iter()
        .map(|r| Example::decode(&r[..]).unwrap())
        .collect()
}

fn feature(example: &Example, name: &str) -> Option<Feature> {
    example
        .features
        .as_ref()
        .unwrap()
        .feature
        .get(name)
        .cloned()
}

#[test]
fn uint64_above_i64_max_is_an_error_naming_the_row() {
    let batch = one_column("u", Arc::new(UInt64Array::from(vec![1, u64::MAX])));
    let err = encode(&batch, &EncodeOptions::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "column \"u\", row 1: 18446744073709551615 is above i64::MAX"
    );
}

#[test]
fn float64_rounding_to_inf_is_an_error_but_inf_and_nan_pass() {
    let batch = one_column(
        "f",
        Arc::new(Float64Array::from(vec![
            f64::INFINITY,
            f64::NAN,
            3.4028235e38,
            1e-50,
        ])),
    );
    let ex = decoded(&batch);
    assert_eq!(
        feature(&ex[0], "f"),
        Some(Feature::float(vec![f32::INFINITY]))
    );
    assert_eq!(
        feature(&ex[2], "f"),
        Some(Feature::float(vec![f32::MAX])),
        "rounds to FLT_MAX: fine"
    );
    assert_eq!(
        feature(&ex[3], "f"),
        Some(Feature::float(vec![0.0])),
        "underflow to 0: fine"
    );
    let batch = one_column("f", Arc::new(Float64Array::from(vec![1.0, 1.0, 3.5e39])));
    let err = encode(&batch, &EncodeOptions::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "column \"f\", row 2: 3.5e39 is beyond float32 range"
    );
    // In a list, the row holding the element is named.
    let mut list = ListBuilder::new(Float64Builder::new());
    list.append_value([Some(1.0)]);
    list.append_value([Some(2.0), Some(-1e300)]);
    let err = encode(
        &one_column("l", Arc::new(list.finish())),
        &EncodeOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "column \"l\", row 1: -1e300 is beyond float32 range"
    );
}

#[test]
fn decimals_become_floats() {
    let dec = Decimal128Array::from(vec![Some(12345), None, Some(-5)])
        .with_precision_and_scale(10, 2)
        .unwrap();
    let ex = decoded(&one_column("p", Arc::new(dec)));
    assert_eq!(feature(&ex[0], "p"), Some(Feature::float(vec![123.45])));
    assert_eq!(feature(&ex[1], "p"), None);
    assert_eq!(feature(&ex[2], "p"), Some(Feature::float(vec![-0.05])));
    let big = Decimal256Array::from(vec![Some(arrow_buffer::i256::from_i128(7))])
        .with_precision_and_scale(40, 1)
        .unwrap();
    assert_eq!(
        feature(&decoded(&one_column("q", Arc::new(big)))[0], "q"),
        Some(Feature::float(vec![0.7]))
    );
}

#[test]
fn temporal_columns_keep_their_stored_integers() {
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("d32", Arc::new(Date32Array::from(vec![19_000]))),
        ("d64", Arc::new(Date64Array::from(vec![1_641_600_000_000]))),
        (
            "ts",
            Arc::new(TimestampNanosecondArray::from(vec![-5]).with_timezone("UTC")),
        ),
        ("t32", Arc::new(Time32MillisecondArray::from(vec![1000]))),
        ("t64", Arc::new(Time64MicrosecondArray::from(vec![7]))),
        ("dur", Arc::new(DurationSecondArray::from(vec![-9]))),
    ];
    let batch = RecordBatch::try_from_iter(cols).unwrap();
    let ex = &decoded(&batch)[0];
    for (name, v) in [
        ("d32", 19_000),
        ("d64", 1_641_600_000_000),
        ("ts", -5),
        ("t32", 1000),
        ("t64", 7),
        ("dur", -9),
    ] {
        assert_eq!(feature(ex, name), Some(Feature::int64(vec![v])), "{name}");
    }
    let plan = EncodePlan::new(&batch.schema(), &EncodeOptions::default()).unwrap();
    let units: Vec<_> = plan
        .features(&plan.new_stats())
        .iter()
        .map(|f| (f.name.clone(), f.unit.clone().unwrap()))
        .collect();
    assert_eq!(
        units,
        [
            ("d32", "day"),
            ("d64", "ms"),
            ("dur", "s"),
            ("t32", "ms"),
            ("t64", "us"),
            ("ts", "ns")
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
}

#[test]
fn views_run_ends_and_list_views_map_like_their_plain_types() {
    let views = StringViewArray::from(vec![
        Some("a long string that is not inlined"),
        None,
        Some("x"),
    ]);
    let bin_views = BinaryViewArray::from(vec![Some(&b"\x00\x01"[..]), Some(b""), None]);
    let ree = RunArray::<Int32Type>::try_new(
        &Int32Array::from(vec![2, 3]),
        &Int64Array::from(vec![Some(7), None]),
    )
    .unwrap();
    let lv = ListViewArray::new(
        Arc::new(Field::new_list_field(DataType::Int64, false)),
        ScalarBuffer::from(vec![1, 0, 0]),
        ScalarBuffer::from(vec![2, 0, 1]),
        Arc::new(Int64Array::from(vec![10, 20, 30])),
        None,
    );
    let fsb = FixedSizeBinaryArray::try_from_iter(vec![b"ab", b"cd", b"ef"].into_iter()).unwrap();
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("v", Arc::new(views)),
        ("bv", Arc::new(bin_views)),
        ("ree", Arc::new(ree)),
        ("lv", Arc::new(lv)),
        ("fsb", Arc::new(fsb)),
    ];
    let ex = decoded(&RecordBatch::try_from_iter(cols).unwrap());
    assert_eq!(
        feature(&ex[0], "v"),
        Some(Feature::bytes(vec![
            b"a long string that is not inlined".to_vec()
        ]))
    );
    assert_eq!(feature(&ex[1], "v"), None);
    assert_eq!(
        feature(&ex[0], "bv"),
        Some(Feature::bytes(vec![vec![0, 1]]))
    );
    assert_eq!(feature(&ex[1], "bv"), Some(Feature::bytes(vec![vec![]])));
    assert_eq!(feature(&ex[1], "ree"), Some(Feature::int64(vec![7])));
    assert_eq!(feature(&ex[2], "ree"), None);
    assert_eq!(feature(&ex[0], "lv"), Some(Feature::int64(vec![20, 30])));
    assert_eq!(
        feature(&ex[1], "lv"),
        Some(Feature::int64(vec![])),
        "an empty list stays present"
    );
    assert_eq!(
        feature(&ex[2], "fsb"),
        Some(Feature::bytes(vec![b"ef".to_vec()]))
    );
}

#[test]
fn null_inside_a_list_is_an_error() {
    let mut list = ListBuilder::new(Int32Builder::new());
    list.append_value([Some(1)]);
    list.append_null();
    list.append_value([Some(1), None]);
    let err = encode(
        &one_column("l", Arc::new(list.finish())),
        &EncodeOptions::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("column \"l\", row 2: a null element inside a list"),
        "{err}"
    );
}

#[test]
fn unsupported_types_name_column_and_type() {
    let schema = Schema::new(vec![
        Field::new("ok", DataType::Int32, false),
        Field::new("n", DataType::Null, true),
    ]);
    let err = EncodePlan::new(&schema, &EncodeOptions::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "column \"n\": type Null has no tf.train.Feature mapping"
    );
    assert_eq!(err.hint().unwrap(), "hint: skip it with --exclude n");
    let excluded = EncodeOptions {
        exclude: vec!["n".into()],
        ..Default::default()
    };
    assert!(EncodePlan::new(&schema, &excluded).is_ok());
    for dt in [
        DataType::Interval(arrow_schema::IntervalUnit::DayTime),
        DataType::new_list(
            DataType::Struct(Fields::from(vec![Field::new("a", DataType::Int32, true)])),
            true,
        ),
        DataType::Union(
            arrow_schema::UnionFields::empty(),
            arrow_schema::UnionMode::Dense,
        ),
    ] {
        let schema = Schema::new(vec![Field::new("bad", dt.clone(), true)]);
        let err = EncodePlan::new(&schema, &EncodeOptions::default()).unwrap_err();
        assert!(
            err.to_string().starts_with("column \"bad\": type"),
            "{dt}: {err}"
        );
    }
}

#[test]
fn selection_rename_and_duplicates() {
    let s = StructArray::from(vec![
        (
            Arc::new(Field::new("bytes", DataType::Binary, false)),
            Arc::new(BinaryArray::from(vec![&b"jpg"[..]])) as ArrayRef,
        ),
        (
            Arc::new(Field::new("path", DataType::Utf8, false)),
            Arc::new(StringArray::from(vec!["a.jpg"])) as ArrayRef,
        ),
    ]);
    let batch = RecordBatch::try_from_iter(vec![
        ("image", Arc::new(s) as ArrayRef),
        ("label", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
    ])
    .unwrap();
    let options = EncodeOptions {
        columns: Some(vec!["image".into()]),
        exclude: vec!["image/path".into()],
        rename: vec![("image/bytes".into(), "image/encoded".into())],
        ..Default::default()
    };
    let ex = Example::decode(&encode(&batch, &options).unwrap()[0][..]).unwrap();
    let names: Vec<&String> = ex.features.as_ref().unwrap().feature.keys().collect();
    assert_eq!(names, ["image/encoded"]);
    let unknown = EncodeOptions {
        columns: Some(vec!["nope".into()]),
        ..Default::default()
    };
    let err = EncodePlan::new(&batch.schema(), &unknown).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no column named \"nope\"; available: image/bytes, image/path, label"
    );
    let clash = EncodeOptions {
        rename: vec![("label".into(), "image/path".into())],
        ..Default::default()
    };
    let err = EncodePlan::new(&batch.schema(), &clash).unwrap_err();
    assert!(
        err.to_string()
            .contains("both map to feature \"image/path\""),
        "{err}"
    );
}

#[test]
fn list_of_lists_is_a_feature_list_in_sequence_mode() {
    let mut ll = ListBuilder::new(ListBuilder::new(Int64Builder::new()));
    ll.values().append_value([Some(1), Some(2)]);
    ll.values().append_value([]);
    ll.append(true);
    ll.append_null();
    let batch = RecordBatch::try_from_iter(vec![
        ("steps", Arc::new(ll.finish()) as ArrayRef),
        ("len", Arc::new(Int64Array::from(vec![2, 0])) as ArrayRef),
    ])
    .unwrap();
    let err = EncodePlan::new(&batch.schema(), &EncodeOptions::default()).unwrap_err();
    assert!(err.to_string().contains("is a list of lists"), "{err}");
    let options = EncodeOptions {
        record_type: RecordType::SequenceExample,
        ..Default::default()
    };
    let records = encode(&batch, &options).unwrap();
    use tfshard::example::proto::{FeatureList, FeatureLists, SequenceExample};
    let mut context = Features::default();
    context
        .feature
        .insert("len".into(), Feature::int64(vec![2]));
    let mut lists = FeatureLists::default();
    lists.feature_list.insert(
        "steps".into(),
        FeatureList {
            feature: vec![Feature::int64(vec![1, 2]), Feature::int64(vec![])],
        },
    );
    let want = SequenceExample {
        context: Some(context),
        feature_lists: Some(lists),
    };
    assert_eq!(records[0], want.encode_to_vec());
    let second = SequenceExample::decode(&records[1][..]).unwrap();
    assert!(
        second.feature_lists.unwrap().feature_list.is_empty(),
        "a null list of lists is absent"
    );
}

#[test]
fn all_null_row_gives_empty_features() {
    let batch = one_column("a", Arc::new(Int64Array::from(vec![None::<i64>])));
    assert_eq!(
        encode(&batch, &EncodeOptions::default()).unwrap()[0],
        b"\n\x00"
    );
    let _ = OffsetBuffer::<i32>::new_empty();
}
