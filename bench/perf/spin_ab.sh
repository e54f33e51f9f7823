#!/bin/bash
# spin_ab.sh [-b BUILD_DIR] [-r ROUNDS] [-D SECONDS] [SPIN_US...]
# A/B of the event loop's idle spin (prism_perf --spin) on [::1]: the
# values alternate, ROUNDS times, D seconds each; prints every run and the
# mean Gb/s and CPU s/GB (user+system of both processes) per value.
set -u
BUILD= R=5 D=3
while getopts "b:r:D:" o; do
  case $o in b) BUILD=$OPTARG ;; r) R=$OPTARG ;; D) D=$OPTARG ;;
    *) echo "usage: $0 [-b build] [-r rounds] [-D s] [spin_us...]"; exit 1 ;; esac
done
shift $((OPTIND - 1))
VALUES=${*:-50 0}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
P=${BUILD:-$ROOT/build}/bin/prism_perf
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
PORT=$((20000 + RANDOM % 20000))
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((k = 0; k < R; k++)); do
  for sp in $VALUES; do
    PORT=$((PORT + 1))
    "$P" -p $PORT -L ::1 --spin "$sp" --json > "$TMP/s.json" 2>&1 &
    spid=$!
    sleep 0.3
    "$P" -p $PORT -L ::1 -D "$D" --spin "$sp" --json ::1 > "$TMP/c.json" 2>/dev/null
    wait $spid
    python3 -c "
import json
c=json.load(open('$TMP/c.json')); s=json.load(open('$TMP/s.json'))
print('spin', $sp, 'gbps', c['gbps'], 'cpu_s_per_GB',
      round((c['cpu_seconds']+s['cpu_seconds'])/(c['bytes']/1e9),2))"
  done
done | awk '{print} {s[$2]+=$6; n[$2]++; g[$2]+=$4}
  END {for (k in s) printf "spin %s us: mean %.2f Gb/s, %.2f CPU s/GB (%d runs)\n", k, g[k]/n[k], s[k]/n[k], n[k]}'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
