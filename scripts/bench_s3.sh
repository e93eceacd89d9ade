#!/usr/bin/env bash
# Object-store performance, against moto's S3 server on 127.0.0.1,
# beside plain clients moving the same bytes through the same server in the same run:
#
#   convert S3 -> S3 of the standard table  vs  boto3, 4 threads, 8 MiB parts: GET of the
#                                               inputs + PUT of the same shards
#                                               (scripts/boto3_plain.py; goal <= 1.5x)
#                                           and object_store alone (examples/s3_plain.rs)
#   bench from S3 (one epoch)               vs  GET of the shards, 16 ranges in flight
#   peak RSS, convert S3 -> S3              vs  the same conversion disk -> disk
#   where the S3 -> S3 time goes: the run stopped after each phase (failure points)
#
#   scripts/bench_s3.sh            (RUNS=5 by default: the server shares the two cores and
#                                   a run varies by a third; prints each run, medians, ratios)
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
runs=${RUNS:-5}
[ -d "$data/standard-2000000" ] || "$python" scripts/make_standard_table.py "$data/standard-2000000"
cargo build --release --quiet --example s3_plain
plain=$root/target/release/examples/s3_plain
s3venv=$(scripts/s3_venv.sh)
source scripts/moto.sh
start_moto "$s3venv"
s3="$s3venv/bin/python scripts/s3_client.py"
$s3 mb bench
$s3 put-dir "$data/standard-2000000" bench standard

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
json() { python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }

out_bytes=$("$bin" convert parquet s3://bench/standard -o s3://bench/out --overwrite --quiet --json | json bytes)
# The same shards on disk, for boto3 to upload.
"$bin" convert parquet "$data/standard-2000000" -o "$data/out-s3cmp" --overwrite --quiet
conv=(); over=(); base=(); boto=(); benchr=(); getr=()
for i in $(seq "$runs"); do
  t0=$(now); "$plain" get s3://bench/standard >/dev/null; "$plain" put s3://bench/plain/blob "$out_bytes" >/dev/null; t1=$(now)
  base+=("$(echo "$t1 - $t0" | bc -l)")
  boto+=("$("$s3venv/bin/python" scripts/boto3_plain.py bench standard "$data/out-s3cmp" bench "boto3-$i" | json seconds)")
  # A new output (a scheduled job's new folder), as boto3 writes new objects.
  t0=$(now); "$bin" convert parquet s3://bench/standard -o "s3://bench/new-$i" --quiet; t1=$(now)
  conv+=("$(echo "$t1 - $t0" | bc -l)")
  # --overwrite of the same names: every upload finishes before the first copy.
  t0=$(now); "$bin" convert parquet s3://bench/standard -o s3://bench/out --overwrite --quiet; t1=$(now)
  over+=("$(echo "$t1 - $t0" | bc -l)")
  printf '  run %d: convert S3->S3 %.2f s (--overwrite %.2f s); boto3 GET+PUT %.2f s; x%.2f (x%.2f); object_store GET+PUT %.2f s\n' \
    "$i" "${conv[-1]}" "${over[-1]}" "${boto[-1]}" "$(echo "${conv[-1]} / ${boto[-1]}" | bc -l)" \
    "$(echo "${over[-1]} / ${boto[-1]}" | bc -l)" "${base[-1]}"
  getr+=("$("$plain" get s3://bench/out | json bytes_per_sec)")
  benchr+=("$("$bin" bench s3://bench/out --epochs 1 --json --quiet | json bytes_per_sec)")
  # moto keeps every object (in memory, or in its temporary files): what this run added
  # goes, untimed.
  $s3 rm bench "new-$i/"; $s3 rm bench "boto3-$i/"
done
c=$(printf '%s\n' "${conv[@]}" | median); b=$(printf '%s\n' "${base[@]}" | median)
v=$(printf '%s\n' "${over[@]}" | median); o=$(printf '%s\n' "${boto[@]}" | median)
g=$(printf '%s\n' "${getr[@]}" | median); r=$(printf '%s\n' "${benchr[@]}" | median)
printf 'convert S3->S3, standard table (%s MB of shards): %.2f s; boto3 (4 threads, 8 MiB parts) GET+PUT %.2f s; ratio %.2f (goal <= 1.5)\n' \
  "$((out_bytes / 1000000))" "$c" "$o" "$(echo "$c / $o" | bc -l)"
printf '  with --overwrite of the same names %.2f s; ratio %.2f\n' "$v" "$(echo "$v / $o" | bc -l)"
printf '  object_store alone GET+PUT %.2f s; ratio %.2f\n' "$b" "$(echo "$c / $b" | bc -l)"
printf 'bench from S3: %.0f MB/s; plain GET of the shards %.0f MB/s; ratio %.2f (goal >= 0.8)\n' \
  "$(echo "$r / 1000000" | bc -l)" "$(echo "$g / 1000000" | bc -l)" "$(echo "$r / $g" | bc -l)"
rss() { { /usr/bin/time -f %M "$bin" convert parquet "$@" --overwrite --quiet; } 2>&1 | tail -1; }
rss_read=$(rss s3://bench/standard -o "$data/out-s3disk")
rss_s3=$(rss s3://bench/standard -o s3://bench/out)
rss_disk=$(rss "$data/standard-2000000" -o "$data/out-s3cmp")
printf 'peak RSS, convert S3->disk (the Parquet reader) %d MiB; disk->disk %d MiB; ratio %.2f (goal <= 1.5)\n' \
  "$((rss_read / 1024))" "$((rss_disk / 1024))" "$(echo "$rss_read / $rss_disk" | bc -l)"
printf 'peak RSS, convert S3->S3 %d MiB (parts streamed from the staged files); ratio %.2f\n' \
  "$((rss_s3 / 1024))" "$(echo "$rss_s3 / $rss_disk" | bc -l)"
printf '  the store copying the same shards for the plain client: %.2f s\n' \
  "$("$plain" copy s3://bench/out | json seconds)"
# Where the S3->S3 time goes (a new output), each run: the run stopped after each phase
# by a failure point. Reading and encoding end at convert:written (uploads stream beside
# them; the shard the writer finds the last waits for the count); store:uploaded, every
# upload done (the last shard's under its final name; early copies beside the last
# uploads); publish:placed, every copy made and the temporaries deleted; then the manifest.
for i in $(seq "$runs"); do
  line="  run $i, S3->S3 until"
  for phase in convert:written store:uploaded publish:placed; do
    t0=$(now); TFSHARD_FAILPOINTS="$phase=exit" "$bin" convert parquet s3://bench/standard -o "s3://bench/phase-$i-$phase" --quiet || true; t1=$(now)
    line+=$(printf ' %s %.2f s;' "$phase" "$(echo "$t1 - $t0" | bc -l)")
    $s3 rm bench "phase-$i-$phase/"
  done
  t0=$(now); "$bin" convert parquet s3://bench/standard -o "s3://bench/phase-$i" --quiet; t1=$(now)
  printf '%s published %.2f s\n' "$line" "$(echo "$t1 - $t0" | bc -l)"
  $s3 rm bench "phase-$i/"
done
