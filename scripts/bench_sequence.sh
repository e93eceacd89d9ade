#!/usr/bin/env bash
# SequenceExamples through the pipeline against tf.data's batched parse, same shards, same
# cores: 200,000 records, each a label and a feature list of 1 to 50 steps of 8 floats.
# Warm epochs only. Goal (issue 16): the pipeline >= 10x tf.data.
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
dir=$data/sequence-shards
if [ ! -f "$dir/data.manifest.json" ]; then
  "$python" scripts/make_sequence_table.py "$data/sequence.parquet" "${ROWS:-200000}"
  "$bin" convert parquet "$data/sequence.parquet" -o "$dir" --record-type sequence-example \
    --target-shard-size 32MiB --overwrite --quiet
fi
files=$(ls "$dir"/*.tfrecord)
batch=${BATCH:-64}
tf=$(TF_CPP_MIN_LOG_LEVEL=3 "$python" scripts/tf_sequence_bench.py "$batch" $files 2>/dev/null)
warm() {
  "$python" -c "
import json,sys; r=json.load(sys.stdin); e=r['epochs'][1:]
print(sum(x['records'] for x in e)/sum(x['seconds'] for x in e))"
}
ours=$("$bin" bench "$dir" --json --epochs 3 --batch-size "$batch" --shuffle-buffer 0 | warm)
shuffled=$("$bin" bench "$dir" --json --epochs 3 --batch-size "$batch" | warm)
cached=$("$bin" bench "$dir" --json --epochs 3 --batch-size "$batch" --cache | warm)
echo "== $(echo $files | wc -w) shards, $(du -cb $files | tail -1 | cut -f1) bytes, batch $batch, $(nproc) cores"
printf "%-52s %12.0f records/s\n" "tf.data: batch, parse_sequence_example (RaggedFeature)" "$tf"
printf "%-52s %12.0f records/s  %6.1fx tf.data\n" "tfshard pipeline (no shuffle, as tf.data)" "$ours" "$(echo "$ours / $tf" | bc -l)"
printf "%-52s %12.0f records/s  %6.1fx tf.data\n" "tfshard pipeline (shuffle 10000)" "$shuffled" "$(echo "$shuffled / $tf" | bc -l)"
printf "%-52s %12.0f records/s  %6.1fx tf.data\n" "tfshard pipeline (shuffle 10000, cached epochs)" "$cached" "$(echo "$cached / $tf" | bc -l)"
