//! Any bytes, decoded as an Example and a SequenceExample, printed as `inspect` prints
//! them and fed to schema inference: errors, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tfshard::example::decode::push_json;
use tfshard::example::schema::SpecInference;
use tfshard::example::{decode_record, RecordType};

fuzz_target!(|data: &[u8]| {
    for record_type in [RecordType::Example, RecordType::SequenceExample] {
        if let Ok(record) = decode_record(data, record_type) {
            let mut out = String::new();
            push_json(&mut out, &record);
            let mut inference = SpecInference::new();
            let _ = inference.add(&record);
            let _ = inference.add(&record);
            let _ = inference.finish();
        }
    }
});
