#!/usr/bin/env bash
# The pipeline's cache on the standard table (2M records of ~200 bytes in 32 MiB shards):
# in one run per setting, warm uncached epochs (read + CRC + parse; the first epoch is
# left out) against cached epochs (in memory, and from a cache file a first run filled),
# at batch 64 (the default) and 256; and the in-memory cache's bytes against the parsed
# batches' bytes (values and row splits) and the process's anonymous memory.
# Goals (issue 16): cached >= 1.5x uncached records/s; memory cache <= 1.3x parsed size.
set -euo pipefail
source "$(dirname "$0")/bench_data.sh"
standard_shards
dir=$data/shards-32mib
cache_file=$data/standard.cache
epochs=${EPOCHS:-4}
rate() {
  "$python" -c "
import json,sys; r=json.load(sys.stdin); want=sys.argv[1]
e=[x for x in r['epochs'] if x['source']==want and (want!='files' or x['epoch']>0)]
c=r.get('cache') or {}
print(sum(x['records'] for x in e)/sum(x['seconds'] for x in e), c.get('bytes',0), c.get('parsed_bytes',0), r['epochs'][-1]['peak_anon_rss_bytes'])" "$1"
}
printf "%-10s %16s %16s %16s %8s %8s\n" batch "uncached rec/s" "memory rec/s" "file rec/s" memory file
for bs in 64 256; do
  common=(bench "$dir" --json --drop-remainder --batch-size "$bs")
  read -r plain _ _ plain_anon < <("$bin" "${common[@]}" --epochs "$epochs" | rate files)
  read -r mem b p a < <("$bin" "${common[@]}" --epochs "$epochs" --cache | rate cache)
  # The memory figures at the default batch size.
  [ "$bs" = 64 ] && { bytes=$b; parsed=$p; anon=$a; }
  rm -f "$cache_file"
  "$bin" "${common[@]}" --epochs 1 --cache-file "$cache_file" > /dev/null
  read -r file _ _ _ < <("$bin" "${common[@]}" --epochs "$epochs" --cache-file "$cache_file" | rate cache)
  printf "%-10s %16.0f %16.0f %16.0f %7.2fx %7.2fx\n" "$bs" "$plain" "$mem" "$file" \
    "$(echo "$mem / $plain" | bc -l)" "$(echo "$file / $plain" | bc -l)"
done
printf "batch 64, memory cache: %.1f MiB for %.1f MiB of parsed batches (%.2fx); anonymous memory %.0f MiB (uncached run: %.0f MiB)\n" \
  "$(echo "$bytes / 1048576" | bc -l)" "$(echo "$parsed / 1048576" | bc -l)" "$(echo "$bytes / $parsed" | bc -l)" \
  "$(echo "$anon / 1048576" | bc -l)" "$(echo "$plain_anon / 1048576" | bc -l)"
rm -f "$cache_file"
