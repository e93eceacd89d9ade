//! Any bytes, read as a plain, gzip or zlib record stream: errors, never a panic, and
//! never an allocation beyond what the input holds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tfshard::tfrecord::{self, Compression, RecordReader};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, bytes)) = data.split_first() else { return };
    let compression = match mode % 3 {
        0 => Compression::None,
        1 => Compression::Gzip,
        _ => Compression::Zlib,
    };
    let source = tfrecord::decompress(std::io::Cursor::new(bytes.to_vec()), compression);
    let mut reader = RecordReader::new(source).with_check_data_crc(mode & 0x80 == 0);
    if compression == Compression::None && mode & 0x40 != 0 {
        reader = reader.with_total_len(bytes.len() as u64);
    }
    for _ in 0..1000 {
        match reader.read_record() {
            Ok(Some(record)) => assert!(record.len() <= bytes.len() * 1100 + 1 << 20),
            Ok(None) => break,
            Err(_) => {}
        }
    }
});
