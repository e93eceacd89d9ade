#!/usr/bin/env bash
# Apache Iceberg tables, in one run beside the alternative:
#
#   convert iceberg   on the standard table written by pyiceberg (~6 data files, x as
#                     list<float>)   vs   convert parquet on the same data files
#                     (goal: at most 1.15x)
#
#   scripts/bench_iceberg.sh        (RUNS=3 by default: 9 interleaved pairs)
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
runs=${RUNS:-3}
iceberg_python=$(scripts/iceberg_venv.sh)/bin/python
[ -d "$data/standard-2000000" ] || "$python" scripts/make_standard_table.py "$data/standard-2000000"
made="$data/standard-iceberg"
table="$made/warehouse/bench/standard"
if [ ! -d "$table/metadata" ]; then
  rm -rf "$made"
  "$iceberg_python" scripts/make_standard_iceberg.py "$data/standard-2000000" "$made"
fi
# The same data files, as a plain folder `convert parquet` takes.
plain="$data/standard-iceberg-plain"
rm -rf "$plain"; mkdir -p "$plain"
for f in "$table"/data/*.parquet; do ln "$f" "$plain/$(basename "$f")"; done
files=$(ls "$plain" | wc -l)

# Interleaved runs (a sub-second run is noisy: each pair runs under the same conditions),
# medians of each.
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
i=(); p=(); ir=0; pr=0
for _ in $(seq "$((runs * 3))"); do
  for which in iceberg parquet; do
    rm -rf "$data/iceberg-out"; sync
    if [ $which = iceberg ]; then input=("$table"); else input=("$plain"); fi
    /usr/bin/time -f "%e %M" -o "$data/time.txt" "$bin" convert $which "${input[@]}" -o "$data/iceberg-out" --quiet --target-shard-size 32MiB
    read -r s kb < "$data/time.txt"
    echo "  $which: $s s, $((kb / 1024)) MiB"
    if [ $which = iceberg ]; then i+=("$s"); [ "$kb" -gt "$ir" ] && ir=$kb; else p+=("$s"); [ "$kb" -gt "$pr" ] && pr=$kb; fi
  done
done
is=$(printf '%s\n' "${i[@]}" | median); ps_=$(printf '%s\n' "${p[@]}" | median)
echo "standard table as Iceberg ($files data files), $((runs * 3)) interleaved runs: convert iceberg ${is} s (peak $((ir / 1024)) MiB), convert parquet on the same files ${ps_} s (peak $((pr / 1024)) MiB): ratio $(echo "$is / $ps_" | bc -l | cut -c1-4) (goal <= 1.15)"
