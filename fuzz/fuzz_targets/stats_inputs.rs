//! What users feed the statistics: records counted (scanned and decoded), a shard's
//! partial statistics read back, a statistics file (a baseline, ours or TFDV's) compared,
//! summarized and drawn, a TFDV schema parsed and checked: errors, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use tfshard::example::RecordType;
use tfshard::stats::drift::{compare, Thresholds};
use tfshard::stats::{html, proto, summarize, tfdv_schema, Partial};

fuzz_target!(|data: &[u8]| {
    for record_type in [RecordType::Example, RecordType::SequenceExample] {
        let mut p = Partial::new();
        if p.add_payload(data, record_type).is_ok() && p.add_payload(data, record_type).is_ok() {
            let bytes = p.to_bytes();
            let back = Partial::from_bytes(&bytes).expect("our own bytes read back");
            assert_eq!(back.to_bytes(), bytes);
        }
    }
    if let Ok(p) = Partial::from_bytes(data) {
        let stats = p.to_proto();
        let _ = summarize(&stats);
    }
    if let Ok(list) = proto::DatasetFeatureStatisticsList::decode(data) {
        if let Some(d) = list.datasets.first() {
            let _ = compare(d, d, &Thresholds::default());
            let _ = summarize(d);
            let _ = html::page("fuzz", d, Some(d));
            let text = tfdv_schema::infer_text(d);
            let schema = tfdv_schema::parse_text(&text).expect("our own schema parses");
            let _ = tfdv_schema::check(d, &schema);
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(schema) = tfdv_schema::parse_text(text) {
            let _ = tfdv_schema::check(&proto::DatasetFeatureStatistics::default(), &schema);
        }
    }
});
