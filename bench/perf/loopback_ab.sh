#!/bin/bash
# loopback_ab.sh [-r ROUNDS] [-t MIN_TIME] [-c CPU] MICROBENCH [MICROBENCH ...]
# A/B of #2's loopback (docs/benchmarks.md "Micro-benchmarks") between
# prism_microbench binaries (e.g. a copy of build/bin/prism_microbench
# before and after an engine change): each round runs every binary once,
# in turn, pinned to one CPU (taskset -c CPU, default the last one), with
# --benchmark_filter='NoPlacement|VsMemcpy/shift:0/method:0', and prints
# per run and, at the end, per binary the medians of `_NoPlacement_`'s ns
# per packet and of BM_EngineLoopbackVsMemcpy's loopback and memcpy us per
# MiB and pct_of_memcpy.
# Why pinned, and why the memcpy half is not a fixed yardstick (it sits
# at one of two levels for minutes at a time, so pct_of_memcpy moves with
# it while the loopback holds still): docs/benchmarks.md "Pinned runs".
# Compare binaries by the loopback and `_NoPlacement_` medians of
# alternated rounds; quote pct_of_memcpy with the memcpy figure beside it.
set -u
R=5 T=0.5 CPU=$(($(nproc) - 1))
usage() {
  echo "usage: $0 [-r rounds] [-t min_time] [-c cpu] MICROBENCH..." >&2
  exit 2
}
while getopts "r:t:c:" o; do
  case $o in r) R=$OPTARG ;; t) T=$OPTARG ;; c) CPU=$OPTARG ;; *) usage ;; esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); cpu $CPU; $R rounds of ${T} s"
for ((k = 0; k < R; k++)); do
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    out=$(taskset -c "$CPU" "$bin" \
      --benchmark_filter='NoPlacement|VsMemcpy/shift:0/method:0' \
      --benchmark_min_time="$T" 2>/dev/null)
    row=$(printf '%s\n' "$out" | python3 -c '
import re, sys
t = sys.stdin.read()
def f(k):
    m = re.search(k + r"=([0-9.]+)", t)
    return m.group(1) if m else "nan"
print(f("ns_per_pkt"), f("loopback_us_per_MiB"), f("memcpy_us_per_MiB"),
      f("pct_of_memcpy"))')
    echo "$i $row" >> "$TMP/rows"
    echo "round $k $bin: ns_per_pkt / loopback / memcpy us per MiB / pct: $row"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$TMP/rows" "$@" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for i, bin in enumerate(sys.argv[2:], 1):
    r = [[float(x) for x in l[1:]] for l in rows if l[0] == str(i)]
    med = [statistics.median(c) for c in zip(*r)]
    print(f"{bin}: median NoPlacement {med[0]:.2f} ns/pkt, loopback "
          f"{med[1]:.2f} us/MiB, memcpy {med[2]:.2f} us/MiB, "
          f"pct_of_memcpy {med[3]:.1f} ({len(r)} runs)")
PY
