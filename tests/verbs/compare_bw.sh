#!/bin/bash
# compare_bw.sh VERBS_PERF [DEVICE] [PRISM_PERF] - inside the rxe VM:
# perftest's ib_write_bw, Prism's verbs_perf (engine + VerbsDatapath, one
# thread) and, when given, prism_perf --datapath verbs (the public Endpoint
# API, server and client processes over a TCP side channel) on the same
# soft-RoCE device, same message size, in the same VM run. Prints METRIC lines and the ratio; asserts nothing about
# speed (TCG jitter), only that both ran. Exit 77 outside the VM.
# ib_write_bw: `-d DEV -x GID -F -s 65536 -n COUNT` (client and server), so
# its defaults: 1 RC QP, tx depth 128 (128 x 64 KiB = 8 MiB in flight), CQ
# moderation 100 (one signalled WR per 100), post list 1, no inline (64 KiB
# is above the inline limit), plain RDMA WRITE (no receive completion).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/vm_perf_opts.sh"
PERF=${1:?verbs_perf binary}
DEV=${2:-${PRISM_RXE_DEV:-rxe_lo}}
PPERF=${3:-}
SIZE=${SIZE:-65536}; COUNT=${COUNT:-500}
[ -d /sys/class/infiniband/$DEV ] || { echo "SKIP: no RDMA device $DEV (runs in the rxe VM)"; exit 77; }
command -v ib_write_bw >/dev/null || { echo "SKIP: ib_write_bw (perftest) missing"; exit 77; }
# GID index of the RoCE v2 IPv4-mapped GID (what verbs_perf picks too).
GIDX=$(vm_roce_gid $DEV)
[ $GIDX -ge 0 ] || { echo "FAIL: no RoCE v2 IPv4 GID on $DEV"; exit 1; }
# ib_write_bw runs before and after every Prism run; each ratio uses the mean
# of its two neighbours (the host is shared, its speed drifts).
port=18515
run_ib() {
  port=$((port+1))
  ib_write_bw -d $DEV -x $GIDX -F -s $SIZE -n $COUNT -p $port > /tmp/ibwbw.server 2>&1 & spid=$!
  for i in $(seq 1 300); do ss -Hltn "sport = :$port" | grep -q . && break; sleep 0.1; done
  ib_write_bw -d $DEV -x $GIDX -F -s $SIZE -n $COUNT -p $port 127.0.0.1 > /tmp/ibwbw.client 2>&1; crc=$?
  wait $spid; src=$?
  [ $crc = 0 ] && [ $src = 0 ] || { echo "FAIL: ib_write_bw (client rc=$crc server rc=$src)"; cat /tmp/ibwbw.client /tmp/ibwbw.server; exit 1; }
  IB=$(awk '/^ *#bytes/{h=1;next} h&&NF>=4{print $4; exit}' /tmp/ibwbw.client)
  [ -n "$IB" ] && awk "BEGIN{exit !($IB > 0)}" || { echo "WARN: ib_write_bw reported no bandwidth:"; cat /tmp/ibwbw.client; }
  echo "METRIC ib_write_bw_MBps $IB (device $DEV, $SIZE B x $COUNT, 1 RC QP)"
}
run_ib; sed -n '/#bytes/,$p' /tmp/ibwbw.client
# Prism: 8 paths sprayed over 8 data QPs; one run per chunk size (bytes per
# WRITE-with-immediate: 65536 = the datapath's default, one WRITE per 64 KiB
# message as ib_write_bw; 32768 = the default before 2026-12-03 13:00;
# 4096 = one RoCE packet per WRITE, as MRC sprays).
for CHUNK in ${CHUNKS:-65536 32768 4096}; do
  IB0=$IB
  "$PERF" --device $DEV --size $SIZE --count $COUNT --qps 8 --paths 8 --chunk $CHUNK --depth 128 > /tmp/vperf.out 2>&1; prc=$?
  cat /tmp/vperf.out
  [ $prc = 0 ] || { echo "FAIL: verbs_perf rc=$prc (chunk $CHUNK)"; exit 1; }
  PR=$(awk '/^METRIC verbs_perf_MBps/{print $3}' /tmp/vperf.out)
  run_ib
  echo "METRIC prism_verbs_MBps_chunk$CHUNK $PR (device $DEV, $SIZE B x $COUNT, 8 paths on 8 $(grep -o '[a-z]* QPs' /tmp/vperf.out | head -1))"
  echo "METRIC prism_vs_ib_write_bw_chunk$CHUNK $(awk "BEGIN{printf \"%.2f\", $PR/(($IB0+$IB)/2)}") (ib_write_bw $IB0 before, $IB after)"
done
# prism_perf --datapath verbs: the Endpoint API (event-loop thread, blob
# exchange over TCP), 8 paths on 8 data QPs, the datapath's chunk size (64
# KiB WRITEs), verbs_perf's timers (base RTT 2 ms, RTO ceiling 2 s,
# congestion "fixed"; vm_perf_opts.sh says why), two windows:
#   fair   VM_PP_OPTS_FAIR: 128 x 64 KiB = 8 MiB in flight, as ib_write_bw
#          (tx depth 128); see vm_perf_opts.sh. The ratio METRIC of record.
#   3.75MB VM_PP_OPTS: a window of 57 messages (the runs before 2026-12-02
#          19:50; kept for continuity).
# ib_write_bw runs after each; every ratio uses the ib_write_bw runs just
# before and after it. PRISM_VERBS_STATS=1: the client's datapath counters
# (tx_fallback = chunks sent whole over the control QP because the peer's
# region advertisement had not arrived yet: 0 since the HELLO exchange;
# tx_wait_ready = bursts that waited for the server's HELLO instead;
# tx_closes, completions_held) and, from --json, the hand-offs between the
# client's posting thread and its loop thread (loop_wakeups, app_wakeups)
# and the client process's context switches (nvcsw, nivcsw).
run_pp() { # tag options...
  local tag=$1; shift
  IB0=$IB
  PP="--datapath verbs --device $DEV --qps 8 --paths 8 -s $SIZE -t 128 $*"
  PRISM_VERBS_STATS=1 "$PPERF" $PP -n $COUNT -p 18600 > /tmp/pperf.server 2>&1 & ppid=$!
  for i in $(seq 1 300); do ss -Hltn "sport = :18600" | grep -q . && break; sleep 0.1; done
  PRISM_VERBS_STATS=1 timeout 120 "$PPERF" $PP -n $COUNT -p 18600 --json 127.0.0.1 > /tmp/pperf.client 2>&1; crc=$?
  wait $ppid; src=$?
  cat /tmp/pperf.client; tail -5 /tmp/pperf.server
  [ $crc = 0 ] && [ $src = 0 ] || { echo "FAIL: prism_perf --datapath verbs $tag (client rc=$crc server rc=$src)"; cat /tmp/pperf.server; exit 1; }
  PR=$(grep -o '"MBps": *[0-9.]*' /tmp/pperf.client | grep -o '[0-9.]*$')
  [ -n "$PR" ] || { echo "FAIL: no MBps in prism_perf --json output"; exit 1; }
  run_ib
  echo "METRIC prism_perf_verbs_MBps$tag $PR (device $DEV, $SIZE B x $COUNT, 8 paths on 8 QPs, Endpoint API, $*)"
  grep -o '"\(rto_events\|path_timeouts\|paths_retired\|retransmitted_packets\|tail_loss_probes\|srtt_us\|cwnd_bytes\|loop_wakeups\|app_wakeups\|nvcsw\|nivcsw\)": *[0-9.]*' /tmp/pperf.client | tr '\n' ' ' | sed "s/^/METRIC prism_perf_verbs_engine$tag /; s/\$/\n/"
  grep -o 'tx_fallback=[0-9]*\|tx_wait_ready=[0-9]*\|ready_timeouts=[0-9]*\|tx_hellos=[0-9]*\|rx_hellos=[0-9]*\|tx_closes=[0-9]*\|completions_held=[0-9]*\|rx_ctrl=[0-9]*\|tx_data_signalled=[0-9]*' /tmp/pperf.client | tr '\n' ' ' | sed "s/^/METRIC prism_perf_verbs_datapath$tag /; s/\$/\n/"
  # The receiver's side: WRITEs received, control SENDs (SACKs) sent and
  # SACKs merged into a later one of the same burst (work per byte).
  grep -m1 'tx_sacks_merged=' /tmp/pperf.server | grep -o 'tx_ctrl=[0-9]*\|tx_sacks_merged=[0-9]*\|rx_data=[0-9]*' | tr '\n' ' ' | sed "s/^/METRIC prism_perf_verbs_server$tag /; s/\$/\n/"
  echo "METRIC prism_perf_verbs_vs_ib_write_bw$tag $(awk "BEGIN{printf \"%.2f\", $PR/(($IB0+$IB)/2)}") (ib_write_bw $IB0 before, $IB after)"
}
if [ -n "$PPERF" ]; then
  run_pp "" $VM_PP_OPTS_FAIR
  run_pp _w3750k $VM_PP_OPTS
fi
