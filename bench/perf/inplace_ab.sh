#!/bin/bash
# inplace_ab.sh [-r REPS] [-n ITERS] [-s BYTES] [-b BUILD] [-x EXTRA_CLIENT_OPTS]
#               [-M MTU]
# A/B of prism_perf's receive paths on [::1] (or, with -M, across a netns
# veth pair of that MTU built by tests/udp/netns_fabric.sh; needs root): the
# receive buffer (GRO on,
# the engine copies each payload to the region) against receive in place
# (--in-place: header peeked, payload read straight to the region, no GRO).
# Alternates the two, REPS times each, a fixed amount of data per run
# (ITERS x BYTES), and reports the receiver's CPU time (perf stat
# task-clock of the server process) per GB and the client's Gb/s, with the
# medians. CPU time, not wall time: the machine may be shared.
set -u
R=5 N=30000 S=65536 BUILD= X= MTU=
ARGS=("$@")
while getopts "r:n:s:b:x:M:" o; do
  case $o in r) R=$OPTARG ;; n) N=$OPTARG ;; s) S=$OPTARG ;; b) BUILD=$OPTARG ;;
    x) X=$OPTARG ;; M) MTU=$OPTARG ;;
    *) echo "usage: $0 [-r reps] [-n iters] [-s bytes] [-b build] [-x client opts] [-M mtu]"; exit 1 ;; esac
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PERF=${BUILD:-$ROOT/build}/bin/prism_perf
if [ -n "$MTU" ] && [ -z "${PRISM_NS_A:-}" ]; then
  exec bash "$ROOT/tests/udp/netns_fabric.sh" 1 "$MTU" bash "$0" "${ARGS[@]}"
fi
SX= CX= SA=::1 CA=::1 HOST=::1
if [ -n "${PRISM_NS_A:-}" ]; then
  SX="ip netns exec $PRISM_NS_B" CX="ip netns exec $PRISM_NS_A"
  SA=fd77:0::2 CA=fd77:0::1 HOST=fd77:0::2
fi
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
PORT=$((30000 + RANDOM % 20000))
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$R"); do
  for mode in buffer in-place; do
    opt=; [ $mode = in-place ] && opt=--in-place
    PORT=$((PORT + 1))
    $SX perf stat -x, -e task-clock -o "$TMP/ps" -- "$PERF" -p $PORT -L $SA $opt \
      > /dev/null 2>&1 &
    sp=$!
    sleep 0.4
    $CX "$PERF" -p $PORT -L $CA -n "$N" -s "$S" $X --json $HOST > "$TMP/c.json" 2>/dev/null
    wait $sp
    python3 - "$mode" "$TMP" <<'PY' >> "$TMP/rows"
import json, sys
mode, tmp = sys.argv[1], sys.argv[2]
c = json.load(open(tmp + '/c.json'))
ms = [float(l.split(',')[0]) for l in open(tmp + '/ps') if 'task-clock' in l][0]
gb = c['bytes'] / 1e9
print(mode, round(ms / 1000 / gb, 3), round(c['gbps'], 2), round(c['cpu_seconds'] / gb, 3))
PY
  done
done
python3 - "$TMP/rows" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
for mode in ('buffer', 'in-place'):
    r = [x for x in rows if x[0] == mode]
    srv = [float(x[1]) for x in r]; g = [float(x[2]) for x in r]; cl = [float(x[3]) for x in r]
    print(f"{mode:9s} receiver CPU s/GB {' '.join(f'{v:.3f}' for v in srv)}  median {statistics.median(srv):.3f} | "
          f"sender {statistics.median(cl):.3f} | Gb/s median {statistics.median(g):.2f}")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; ${MTU:+netns veth MTU $MTU: }$PERF -L $SA [--in-place] / -L $CA -n $N -s $S $X $HOST"
