#!/bin/bash
# udp_stall_diag.sh PRISM_PERF [RUNS] [SECONDS]
# Diagnoses bad UDP runs: RUNS prism_perf runs (defaults of tlp_ab.sh: one
# netns veth pair at MTU 9000, GSO + GRO, 64 KiB messages) and, around each,
# the kernel's drop counters in both namespaces (nstat: Udp6RcvbufErrors,
# Udp6SndbufErrors, Udp6InErrors, ...; ip -s link drops on the veths; tc
# qdisc drops) plus prism_perf's datapath and engine counters (--json).
# One line per run; a run with RTOs also prints every nonzero kernel delta.
# Needs root (tests/udp/netns_fabric.sh). SERVER_WRAP / CLIENT_WRAP prefix
# the server / client command (e.g. SERVER_WRAP="nice -n 19" starves the
# receiver; "nice -n -15" on both favours them over the machine's load).
set -u
BIN=${1:?prism_perf binary} RUNS=${2:-10} D=${3:-3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${PRISM_NS_A:-}" ]; then
  exec bash "$ROOT/tests/udp/netns_fabric.sh" 1 9000 "$0" "$@"
fi
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
snap() {  # snap TAG: kernel counters of both namespaces into $TMP/TAG.*
  for ns in A B; do
    local n; [ $ns = A ] && n=$PRISM_NS_A || n=$PRISM_NS_B
    ip netns exec "$n" nstat -az > "$TMP/$1.$ns.nstat" 2>/dev/null
    ip -n "$n" -s -j link show > "$TMP/$1.$ns.link" 2>/dev/null
    ip netns exec "$n" tc -s -j qdisc show > "$TMP/$1.$ns.tc" 2>/dev/null
  done
  cat /proc/net/softnet_stat > "$TMP/$1.softnet"
}
for ((r = 0; r < RUNS; r++)); do
  port=$((30000 + RANDOM % 10000))
  ip netns exec "$PRISM_NS_B" ${SERVER_WRAP:-} "$BIN" -p $port -L fd77:0::2 --json \
    > "$TMP/s.json" 2> "$TMP/s.err" &
  sp=$!
  sleep 0.3
  snap pre
  ip netns exec "$PRISM_NS_A" ${CLIENT_WRAP:-} "$BIN" -p $port -s 65536 -D "$D" \
    -L fd77:0::1 --json fd77:0::2 > "$TMP/c.json" 2> "$TMP/c.err"
  wait $sp
  snap post
  python3 - "$r" "$TMP" <<'PY'
import json, sys
r, tmp = sys.argv[1], sys.argv[2]
def nstat(path):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 2 and f[1].isdigit():
            out[f[0]] = int(f[1])
    return out
def links(path):
    out = {}
    try:
        for l in json.load(open(path)):
            s = l.get('stats64', {})
            out[l['ifname']] = (s.get('rx', {}).get('dropped', 0),
                                s.get('tx', {}).get('dropped', 0))
    except Exception:
        pass
    return out
def qdrops(path):
    try:
        return sum(q.get('drops', 0) for q in json.load(open(path)))
    except Exception:
        return 0
def softnet(path):  # dropped (col 2) and time_squeeze (col 3), all CPUs
    d = s = 0
    for line in open(path):
        f = line.split()
        d += int(f[1], 16); s += int(f[2], 16)
    return d, s
try:
    c = json.load(open(f'{tmp}/c.json'))
except Exception as e:
    print(r, 'failed:', e); sys.exit(0)
try:
    sv = json.load(open(f'{tmp}/s.json'))
except Exception:
    sv = {}
keys = ['Udp6RcvbufErrors', 'Udp6SndbufErrors', 'Udp6InErrors',
        'Ip6InDiscards', 'Ip6OutDiscards', 'UdpRcvbufErrors']
dl = {}
for ns in 'AB':
    a, b = nstat(f'{tmp}/pre.{ns}.nstat'), nstat(f'{tmp}/post.{ns}.nstat')
    dl[ns] = {k: b.get(k, 0) - a.get(k, 0) for k in b}
la, lb = links(f'{tmp}/pre.A.link'), links(f'{tmp}/post.A.link')
lba, lbb = links(f'{tmp}/pre.B.link'), links(f'{tmp}/post.B.link')
vdrop = sum(lb[k][0] - la.get(k, (0, 0))[0] + lb[k][1] - la.get(k, (0, 0))[1]
            for k in lb)
vdrop += sum(lbb[k][0] - lba.get(k, (0, 0))[0] +
             lbb[k][1] - lba.get(k, (0, 0))[1] for k in lbb)
qd = (qdrops(f'{tmp}/post.A.tc') - qdrops(f'{tmp}/pre.A.tc') +
      qdrops(f'{tmp}/post.B.tc') - qdrops(f'{tmp}/pre.B.tc'))
sd0, ss0 = softnet(f'{tmp}/pre.softnet'); sd1, ss1 = softnet(f'{tmp}/post.softnet')
load = open('/proc/loadavg').read().split()[0]
import re
m = re.search(r'rx_duplicates=(\d+)', sv.get('engine', ''))
dup = m.group(1) if m else '?'
def kd(j):  # the datapath's count of kernel socket drops (SO_RXQ_OVFL)
    k = re.search(r'rx_kernel_drops=(\d+)', j.get('datapath_detail', ''))
    return k.group(1) if k else '?'
kern = ' '.join(f'{ns}.{k}={dl[ns].get(k, 0)}' for ns in 'AB' for k in keys[:3])
print(f"run{r} gbps={c['gbps']:.3f} retx={c.get('retransmitted_packets')} "
      f"tlp={c.get('tail_loss_probes')} rto={c.get('rto_events')} "
      f"retired={c.get('paths_retired')} srtt_us={c.get('srtt_us')} "
      f"{kern} veth_drops={vdrop} qdisc_drops={qd} "
      f"softnet_drop={sd1 - sd0} squeeze={ss1 - ss0} "
      f"c_bp={c.get('dp_tx_backpressure')} c_txerr={c.get('dp_tx_errors')} "
      f"c_dpdrops={c.get('dp_drops')} s_dpdrops={sv.get('dp_drops')} "
      f"s_bp={sv.get('dp_tx_backpressure')} "
      f"c_stalls={c.get('loop_stalls')}/{c.get('loop_stall_ms')}ms/"
      f"max{c.get('loop_max_gap_ms')}ms "
      f"s_stalls={sv.get('loop_stalls')}/{sv.get('loop_stall_ms')}ms/"
      f"max{sv.get('loop_max_gap_ms')}ms "
      f"nivcsw={c.get('nivcsw')}/{sv.get('nivcsw')} "
      f"run_delay_ms={c.get('run_delay_ms')}/{sv.get('run_delay_ms')} "
      f"kdrops={kd(c)}/{kd(sv)} "
      f"dup={dup} load={load}")
if (c.get('rto_events') or 0) > 0 or (c.get('retransmitted_packets') or 0) > 300:
    for ns in 'AB':
        nz = {k: v for k, v in dl[ns].items() if v and
              ('Err' in k or 'Drop' in k or 'Discard' in k or 'Prune' in k or
               'Overflow' in k or 'Collapse' in k)}
        print(f"  {ns} kernel deltas: {nz}")
    print('  client datapath:', c.get('datapath_detail'))
    print('  server datapath:', sv.get('datapath_detail'))
    print('  client engine:', c.get('engine'))
    print('  server engine:', sv.get('engine'))
PY
done
