#!/bin/bash
# tlp_ab.sh BEFORE_PRISM_PERF AFTER_PRISM_PERF [PAIRS] [SECONDS]
# A/B of two prism_perf binaries (e.g. before/after an engine change) on
# one netns veth pair at MTU 9000 (tests/udp/netns_fabric.sh; needs root),
# prism_perf's defaults (GSO + GRO, NSCC), runs alternated before/after.
# Prints one line per run: Gb/s, Gbit per CPU-second (client + server),
# the client's retransmitted packets, tail-loss probes, RTOs and path
# retirements, the server's duplicates and kernel drops, both loops' stall
# time, with the load average.
# Used for docs/benchmarks.md "Tail-loss probe: one packet, not the flight".
set -u
BEFORE=${1:?before binary} AFTER=${2:?after binary} PAIRS=${3:-4} D=${4:-3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${PRISM_NS_A:-}" ]; then
  exec bash "$ROOT/tests/udp/netns_fabric.sh" 1 9000 "$0" "$BEFORE" "$AFTER" \
    "$PAIRS" "$D"
fi
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
run() {
  local bin=$1 label=$2 port=$((30000 + RANDOM % 10000))
  ip netns exec "$PRISM_NS_B" "$bin" -p $port -L fd77:0::2 --json \
    > "$TMP/s.json" 2> "$TMP/s.err" &
  local sp=$!
  sleep 0.3
  ip netns exec "$PRISM_NS_A" "$bin" -p $port -s 65536 -D "$D" \
    -L fd77:0::1 --json fd77:0::2 > "$TMP/c.json" 2> "$TMP/c.err"
  wait $sp
  python3 - "$label" "$TMP/c.json" "$TMP/s.json" <<'PY'
import json, sys
try:
    c = json.load(open(sys.argv[2]))
except Exception as e:
    print(sys.argv[1], 'failed:', e); sys.exit(0)
try:
    s = json.load(open(sys.argv[3]))
except Exception:
    s = {}
srv_cpu = s.get('cpu_seconds', 0)
import re
def field(j, key, name):  # a counter from a detail string, '?' if absent
    m = re.search(name + r'=(\d+)', j.get(key, ''))
    return m.group(1) if m else '?'

cpu = c.get('cpu_seconds', 0) + srv_cpu
load = open('/proc/loadavg').read().split()[0]
# gbit_per_cpu_s: payload bits moved per CPU-second of client + server,
# steadier than gbps on a loaded machine.
per_cpu = c['bytes'] * 8e-9 / cpu if cpu > 0 else 0
print(f"{sys.argv[1]} gbps={c['gbps']:.3f} gbit_per_cpu_s={per_cpu:.3f} "
      f"retransmitted={c.get('retransmitted_packets')} "
      f"tlp={c.get('tail_loss_probes')} rto={c.get('rto_events')} "
      f"retired={c.get('paths_retired')} "
      # Why (docs/runtime.md "Bad UDP runs"): duplicates at the server
      # (retransmissions whose original had arrived), kernel socket drops,
      # and each side's event-loop stall time (gaps > 2 ms) in ms.
      f"dup={field(s, 'engine', 'rx_duplicates')} "
      f"kdrops={field(s, 'datapath_detail', 'rx_kernel_drops')} "
      f"stall_ms={c.get('loop_stall_ms')}/{s.get('loop_stall_ms')} "
      f"load={load}")
PY
}
for ((r = 0; r < PAIRS; r++)); do
  run "$BEFORE" before
  run "$AFTER" after
done
