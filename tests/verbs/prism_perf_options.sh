#!/bin/bash
# prism_perf_options.sh PRISM_PERF [VARIANT...] - inside the rxe VM: runs
# prism_perf --datapath verbs (65536 B x 500, 8 paths on 8 QPs, -t 128) on
# rxe_lo with each engine-option VARIANT, ib_write_bw before and after each,
# and prints METRIC lines plus the engine counters (RTOs, path timeouts,
# tail-loss probes, srtt, window). Diagnosis tool for docs/verbs.md
# ("Through the Endpoint API"); not in the manifest. Run it in the VM with
#   printf 'opts\t600\tbash %s/tests/verbs/prism_perf_options.sh %s/build/bin/prism_perf A G F\n' \
#     $PWD $PWD > /tmp/m.txt && tests/rxe/run-rxe-vm.sh /tmp/m.txt /tmp/opts-out
# (output in /tmp/opts-out/opts.log). Variants:
#   A  --rate 10 --base-rtt 500 --rto-min 20000 (the old compare_bw.sh: nscc)
#   B  A + --cc fixed          D  A + --no-tlp
#   G  A + --rto-max 2000000   E  A + --cc fixed --rto-max 2000000
#   F  verbs_perf's options: --cc fixed --rate 100 --base-rtt 2000
#      --rto-min 100000 --rto-max 2000000 (compare_bw.sh's setting
#      when this script was written; compare_bw.sh now runs W)
#   H  F with --rate 10 (window 3.75 MB)
#   W  VM_PP_OPTS_FAIR (compare_bw.sh's ratio of record: 8 MiB in
#      flight; VM_PP_OPTS is its second figure)
#   X  W with --wait-us 200 (prism_perf's default completion wait)
#   Y  W with --remote-slots 64 (prism_perf's default receive buffer)
#   S  W with --remote-slots 2 (a 128 KiB receive buffer: the footprint of
#      ib_write_bw, which writes every message into the same few buffers)
#   Z  W with --spin 0 (the loops sleep at once when idle)
#   T  W with --mtu-payload 32768 (the chunk before the 64 KiB default)
#   U  H with --mtu-payload 32768
#   K  W with --ack-delay 0 (delayed SACK at base-rtt / 4 = 500 us, as
#      before 2026-12-03 13:16; VM_TIMER_OPTS has had --ack-delay 4000
#      since)
#   L  H with --ack-delay 0
set -u
source "$(dirname "${BASH_SOURCE[0]}")/vm_perf_opts.sh"
PPERF=${1:?prism_perf binary}; shift
DEV=${PRISM_RXE_DEV:-rxe_lo}; SIZE=65536; COUNT=${COUNT:-500}
[ -d /sys/class/infiniband/$DEV ] || { echo "SKIP: no RDMA device $DEV"; exit 77; }
GIDX=$(vm_roce_gid $DEV)
port=18515
run_ib() {
  port=$((port+1))
  ib_write_bw -d $DEV -x $GIDX -F -s $SIZE -n $COUNT -p $port > /tmp/ibs 2>&1 & spid=$!
  for i in $(seq 1 300); do ss -Hltn "sport = :$port" | grep -q . && break; sleep 0.1; done
  ib_write_bw -d $DEV -x $GIDX -F -s $SIZE -n $COUNT -p $port 127.0.0.1 > /tmp/ibc 2>&1
  wait $spid
  echo "METRIC ib_write_bw_MBps $(awk '/^ *#bytes/{h=1;next} h&&NF>=4{print $4; exit}' /tmp/ibc)"
}
pp=18600
run_pp() {
  local name=$1; shift; pp=$((pp+1))
  local PP="--datapath verbs --device $DEV --qps 8 --paths 8 -s $SIZE -t 128 $*"
  "$PPERF" $PP -n $COUNT -p $pp > /tmp/pps 2>&1 & local ppid=$!
  for i in $(seq 1 300); do ss -Hltn "sport = :$pp" | grep -q . && break; sleep 0.1; done
  PRISM_VERBS_STATS=1 timeout 70 "$PPERF" $PP -n $COUNT -p $pp --json 127.0.0.1 > /tmp/ppc 2>&1; local crc=$?
  sleep 1; kill $ppid 2>/dev/null; wait $ppid
  echo "=== $name: $* (client rc=$crc)"
  tr ',' '\n' < /tmp/ppc | grep -E '"(MBps|rto_events|path_timeouts|tail_loss_probes|retransmitted_packets|paths_retired|srtt_us|cwnd_bytes|loop_wakeups|app_wakeups|nvcsw|nivcsw|mtu_payload|sacks_received|dp_tx_packets|dp_rx_packets|cpu_seconds)"' | tr -d '\n '; echo
  grep -o 'tx_fallback=[0-9]*\|tx_wait_ready=[0-9]*' /tmp/ppc | tr '\n' ' ' | sed "s/^/METRIC prism_perf_datapath_$name /"; echo
  echo "METRIC prism_perf_$name $(grep -o '"MBps": *[0-9.]*' /tmp/ppc | grep -o '[0-9.]*$')"
}
A="--rate 10 --base-rtt 500 --rto-min 20000 --probe-interval 20000"
F="--cc fixed --rate 100 $VM_TIMER_OPTS"
run_ib
[ $# -gt 0 ] || set -- A G F
for v in "$@"; do
  case $v in
    A) run_pp A $A ;;
    B) run_pp B $A --cc fixed ;;
    D) run_pp D $A --no-tlp ;;
    E) run_pp E $A --cc fixed --rto-max 2000000 ;;
    F) run_pp F $F ;;
    G) run_pp G $A --rto-max 2000000 ;;
    H) run_pp H $F --rate 10 ;;
    W) run_pp W $VM_PP_OPTS_FAIR ;;
    X) run_pp X $VM_PP_OPTS_FAIR --wait-us 200 ;;
    Y) run_pp Y $VM_PP_OPTS_FAIR --remote-slots 64 ;;
    S) run_pp S $VM_PP_OPTS_FAIR --remote-slots 2 ;;
    Z) run_pp Z $VM_PP_OPTS_FAIR --spin 0 ;;
    T) run_pp T $VM_PP_OPTS_FAIR --mtu-payload 32768 ;;
    U) run_pp U $F --rate 10 --mtu-payload 32768 ;;
    K) run_pp K $VM_PP_OPTS_FAIR --ack-delay 0 ;;
    L) run_pp L $F --rate 10 --ack-delay 0 ;;
    *) echo "unknown variant $v"; continue ;;
  esac
  run_ib
done
