# Sourced by the benchmark scripts: paths, the release binary, and the generated data
# (under target/bench-data, never committed), each made once.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
data=target/bench-data
python=$(scripts/venv.sh)
cargo build --release --quiet --bin tfshard
bin=$root/target/release/tfshard
mkdir -p "$data"

# The standard table (2M rows, 8 zstd files) converted into 32 MiB shards.
standard_shards() {
  if [ ! -f "$data/shards-32mib/data.manifest.json" ]; then
    [ -d "$data/standard-2000000" ] || "$python" scripts/make_standard_table.py "$data/standard-2000000"
    "$bin" convert parquet "$data"/standard-2000000/*.parquet -o "$data/shards-32mib" --overwrite --quiet --target-shard-size 32MiB
  fi
}

# 6,000 JPEGs of ~90 KB in 10 class folders.
jpeg_folder() {
  [ -d "$data/jpegs" ] || "$python" scripts/make_jpegs.py "$data/jpegs" "${COUNT:-6000}"
}
