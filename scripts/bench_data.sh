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

# The standard table written by deltalake (about six data files) as $data/standard-delta,
# made once ($delta_python: the deltalake venv's python).
standard_delta() {
  [ -d "$data/standard-2000000" ] || "$python" scripts/make_standard_table.py "$data/standard-2000000"
  if [ ! -d "$data/standard-delta/_delta_log" ]; then
    rm -rf "$data/standard-delta"
    "$delta_python" scripts/make_standard_delta.py "$data/standard-2000000" "$data/standard-delta"
  fi
}

# 6,000 JPEGs of ~90 KB in 10 class folders.
jpeg_folder() {
  [ -d "$data/jpegs" ] || "$python" scripts/make_jpegs.py "$data/jpegs" "${COUNT:-6000}"
}

# time_run NAME CMD...: the median wall seconds and the largest peak RSS (MiB) of $runs
# runs (one for a NAME starting with "python"), into ${secs[NAME]} and ${rss[NAME]}.
# With clear=DIR set, DIR (the last run's output) is deleted before each run, untimed:
# freeing its pages is not the work measured. No run inherits another's writeback.
declare -A secs rss
time_run() {
  local name=$1; shift
  local n=${runs:-3} all=() peak=0
  [ "${name#python}" != "$name" ] && n=1
  for _ in $(seq "$n"); do
    [ -n "${clear:-}" ] && rm -rf "$clear"
    sync
    /usr/bin/time -f "%e %M" -o "$data/time.txt" "$@" > /dev/null
    read -r s kb < "$data/time.txt"
    all+=("$s"); [ "$kb" -gt "$peak" ] && peak=$kb
  done
  secs[$name]=$(printf '%s\n' "${all[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  rss[$name]=$((peak / 1024))
}
