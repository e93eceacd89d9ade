#!/usr/bin/env bash
# Image conversion beside the ceiling, in one run on the same disk, page cache warm:
#   cat of every file into one file (read every file, write one stream), cp -r of the
#   folder, tfshard convert images, and the Python way (tf.io.read_file + Example +
#   TFRecordWriter). Median of RUNS (3) for all but Python (1).
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
jpeg_folder

jpegs=$data/jpegs

count=$(find "$jpegs" -type f | wc -l)
bytes=$(find "$jpegs" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
find "$jpegs" -type f -print0 | xargs -0 cat > /dev/null # warm

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
timed() { local s e; s=$(date +%s.%N); "$@" > /dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc -l; }
runs=${RUNS:-3}
cat_s=$(for _ in $(seq "$runs"); do timed sh -c "find '$jpegs' -type f -print0 | sort -z | xargs -0 cat > '$data/all-images.bin'; sync -f '$data/all-images.bin'"; done | median)
cp_s=$(for _ in $(seq "$runs"); do rm -rf "$data/jpegs-copy"; timed sh -c "cp -r '$jpegs' '$data/jpegs-copy'; sync -f '$data/jpegs-copy'"; done | median)
ours_s=$(for _ in $(seq "$runs"); do timed sh -c "'$bin' convert images '$jpegs' -o '$data/jpegs-out' --overwrite --quiet; sync -f '$data/jpegs-out'"; done | median)
py_s=$(timed env TF_CPP_MIN_LOG_LEVEL=3 "$python" scripts/python_image_exporter.py "$jpegs" "$data/jpegs-py")
rm -rf "$data/jpegs-copy" "$data/all-images.bin"
mb=$(echo "$bytes / 1000000" | bc -l)
echo
printf "%d JPEGs, %.0f MB, %d cores, median of %d\n" "$count" "$mb" "$(nproc)" "$runs"
printf "%-36s %8s %10s %10s\n" "run" "seconds" "MB/s" "files/s"
for row in "cat all files into one (ceiling)|$cat_s" "cp -r|$cp_s" "tfshard convert images|$ours_s" "Python (read_file+Example+Writer)|$py_s"; do
  name=${row%|*}; sec=${row#*|}
  printf "%-36s %8.2f %10.0f %10.0f\n" "$name" "$sec" "$(echo "$mb / $sec" | bc -l)" "$(echo "$count / $sec" | bc -l)"
done
printf "tfshard = %.0f%% of the cat ceiling; %.1fx the Python way\n" "$(echo "100 * $cat_s / $ours_s" | bc -l)" "$(echo "$py_s / $ours_s" | bc -l)"
