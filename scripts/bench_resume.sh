#!/usr/bin/env bash
# --resume after a kill: the standard table in 32 MiB shards, S3 -> S3 through
# moto on 127.0.0.1 and disk -> disk, each
#
#   a whole run with --resume            vs  the same run killed once 40% of its shards
#                                            are journaled, then rerun
#                                            (goal: the rerun takes less than a whole run)
#
#   scripts/bench_resume.sh            (RUNS=3 by default; prints each run and medians)
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
runs=${RUNS:-3}
[ -d "$data/standard-2000000" ] || "$python" scripts/make_standard_table.py "$data/standard-2000000"
s3venv=$(scripts/s3_venv.sh)
source scripts/moto.sh
start_moto "$s3venv"
s3="$s3venv/bin/python scripts/s3_client.py"
$s3 mb resume
$s3 put-dir "$data/standard-2000000" resume standard

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
json() { python3 -c "import json,sys; print(json.loads(sys.stdin.read())$1)"; }
size=(--target-shard-size 32MiB --quiet)
shards=$("$bin" convert parquet "$data/standard-2000000" -o "$data/resume-count" --overwrite "${size[@]}" --json | json "['shards']")
kill_at=$(( shards * 4 / 10 ))
echo "the standard table in $shards shards of 32 MiB; killed once $kill_at are journaled"

for where in s3 disk; do
  whole=(); rerun=(); unread=()
  for i in $(seq "$runs"); do
    if [ "$where" = s3 ]; then
      input=s3://resume/standard; a="s3://resume/whole-$i"; b="s3://resume/resumed-$i"
    else
      input="$data/standard-2000000"; a="$data/resume-whole"; b="$data/resume-resumed"
      rm -rf "$a" "$b"
    fi
    t0=$(now); "$bin" convert parquet "$input" -o "$a" --resume "${size[@]}"; t1=$(now)
    whole+=("$(echo "$t1 - $t0" | bc -l)")
    TFSHARD_FAILPOINTS="shard:journaled=exit@$kill_at" "$bin" convert parquet "$input" -o "$b" --resume "${size[@]}" || true
    t0=$(now); out=$("$bin" convert parquet "$input" -o "$b" --resume "${size[@]}" --json); t1=$(now)
    rerun+=("$(echo "$t1 - $t0" | bc -l)")
    unread+=("$(echo "$out" | json "['reused']['unread_records']")")
    printf '  %s run %d: whole %.2f s; rerun after the kill %.2f s (reused %s shards, %s records not read again)\n' \
      "$where" "$i" "${whole[-1]}" "${rerun[-1]}" "$(echo "$out" | json "['reused']['shards']")" "${unread[-1]}"
    if [ "$where" = s3 ]; then $s3 rm resume "whole-$i/"; $s3 rm resume "resumed-$i/"; fi
  done
  w=$(printf '%s\n' "${whole[@]}" | median); r=$(printf '%s\n' "${rerun[@]}" | median)
  printf '%s: whole run %.2f s; rerun with --resume after a kill at 40%% %.2f s; ratio %.2f (goal < 1)\n' \
    "$where" "$w" "$r" "$(echo "$r / $w" | bc -l)"
done
