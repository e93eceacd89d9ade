//! Compiles tensorflow-metadata's `schema.proto` (vendored under `src/stats/tfmd/`, with
//! its license) into a descriptor set, from which `verify --schema` parses TFDV's schemas
//! in text format (prost-reflect). protox is a compiler in Rust: no `protoc` needed.

fn main() {
    let root = "src/stats/tfmd";
    println!("cargo:rerun-if-changed={root}");
    let mut compiler = protox::Compiler::new([root]).expect("the vendored protos' folder");
    compiler.include_imports(true);
    compiler
        .open_file("tensorflow_metadata/proto/v0/schema.proto")
        .unwrap_or_else(|e| panic!("{root}: {e}"));
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(
        out.join("tfmd_schema.bin"),
        compiler.encode_file_descriptor_set(),
    )
    .expect("write the descriptor set");
}
