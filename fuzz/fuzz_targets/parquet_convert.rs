//! Any bytes as a Parquet file, through the whole converter into a scratch folder: an
//! error or a conversion, never a panic, and never a manifest beside an
//! error.
#![no_main]

use std::path::PathBuf;

use libfuzzer_sys::fuzz_target;
use tfshard::convert::Converter;
use tfshard::progress::NoProgress;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("tfshard-fuzz-parquet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let input = dir.join("in.parquet");
    std::fs::write(&input, data).expect("write the input");
    let output: PathBuf = dir.join("out");
    let result = Converter::parquet(vec![input])
        .with_output(&output)
        .with_threads(2)
        .build()
        .and_then(|converter| converter.run(&NoProgress));
    let manifest = output.join("data.manifest.json").exists();
    assert_eq!(result.is_ok(), manifest, "a manifest exactly when the conversion succeeded");
});
