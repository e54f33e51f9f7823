#!/usr/bin/env bash
# Cost of the NCCL plugin layer: the mini-NCCL driver through the plugin
# (nccl_plugin_perf) against Prism's own prism_perf, same data path (Prism
# over UDP on ::1), same engine options, runs interleaved.
#
#   tests/nccl/plugin_vs_perf.sh [rounds=7] [size=1048576] [msgs=400] [depth=32]
#   B=build-dir (default build), TX_MODE=auto|raw|sockets (default auto)
#
# Per run: MB/s (plugin: at the receiver; prism_perf: at the client) and the
# CPU time of both processes together (perf stat task-clock, children
# included) per MB moved; for the plugin also the part of it spent on the two
# driver threads (the mini-NCCL loops, the plugin calls and NCCL-style
# sched_yield polling between them), the rest being Prism's endpoint loop
# threads, and the wall time spent inside isend/irecv/test calls (the plugin
# layer plus the Prism endpoint calls it makes). Prints every run and the
# medians.
#
# Matching options: 64 paths, 9000-byte link MTU, WRITE-with-immediate,
# `depth` outstanding, base RTT 100 us, and the engine's RTO floor and probe
# interval the plugin uses (rto_min 50 us, probe 50 us; prism_perf's own
# defaults are 4 ms and 1 ms).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build}
ROUNDS=${1:-7}
SIZE=${2:-1048576}
MSGS=${3:-400}
DEPTH=${4:-32}
TX_MODE=${TX_MODE:-auto}
MB=$(awk -v s="$SIZE" -v m="$MSGS" 'BEGIN { print s * m / 1e6 }')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

task_ms() {  # perf stat -x, output -> task-clock msec
  awk -F, '/task-clock/ { print $1 }' "$1"
}

echo "uptime: $(uptime)"
printf '%-5s %-12s %10s %12s %14s %14s\n' run tool MB/s "cpu us/MB" "driver us/MB" \
  "in-plugin us/MB"
for r in $(seq "$ROUNDS"); do
  # The plugin (receiver here, sender an exec'd copy).
  perf stat -x, -e task-clock -o "$tmp/ps" env PRISM_ADDRS=127.0.0.1 \
    PRISM_PATHS=64 PRISM_LINK_MTU=9000 PRISM_UDP_TX_MODE="$TX_MODE" \
    LD_LIBRARY_PATH="$B/lib" "$B/bin/nccl_plugin_perf" "$SIZE" "$MSGS" \
    "$DEPTH" >"$tmp/po" 2>&1 || { cat "$tmp/po"; exit 1; }
  mbs=$(sed -n 's/.*: \([0-9.]*\) MB\/s.*/\1/p' "$tmp/po")
  cpu=$(awk -v t="$(task_ms "$tmp/ps")" -v mb="$MB" 'BEGIN { printf "%.0f", t * 1000 / mb }')
  # "... in plugin calls X s ..., ... driver thread Y s" from both sides.
  read -r drv inp < <(awk -v mb="$MB" '{
      for (i = 1; i < NF; ++i) {
        if ($i == "thread") d += $(i + 1) + 0
        if ($i == "calls" && $(i - 1) == "plugin") p += $(i + 1) + 0
      } } END { printf "%.0f %.0f\n", d * 1e6 / mb, p * 1e6 / mb }' "$tmp/po")
  printf '%-5s %-12s %10s %12s %14s %14s\n' "$r" plugin "$mbs" "$cpu" "$drv" "$inp"
  echo "plugin $mbs $cpu $drv $inp" >>"$tmp/all"

  # prism_perf, server and client under one perf stat.
  port=$((19000 + RANDOM % 2000))
  opts="-s $SIZE -n $MSGS -t $DEPTH --immediate -P 64 -m 9000 --rto-min=50"
  opts+=" --probe-interval=50 --base-rtt=100 --tx-mode=$TX_MODE -p $port --json"
  perf stat -x, -e task-clock -o "$tmp/qs" bash -c \
    "'$B/bin/prism_perf' $opts >'$tmp/qsrv' 2>&1 & srv=\$!; sleep 0.3;
     '$B/bin/prism_perf' $opts ::1 >'$tmp/qo' 2>&1; rc=\$?; wait \$srv; exit \$rc" ||
    { cat "$tmp/qo" "$tmp/qsrv"; exit 1; }
  mbs=$(sed -n 's/.*"MBps": \([0-9.]*\).*/\1/p' "$tmp/qo")
  cpu=$(awk -v t="$(task_ms "$tmp/qs")" -v mb="$MB" 'BEGIN { printf "%.0f", t * 1000 / mb }')
  printf '%-5s %-12s %10s %12s %14s %14s\n' "$r" prism_perf "$mbs" "$cpu" - -
  echo "prism_perf $mbs $cpu 0 0" >>"$tmp/all"
done
for tool in plugin prism_perf; do
  for col in 2 3 4 5; do
    awk -v t="$tool" -v c="$col" '$1 == t { print $c }' "$tmp/all" | sort -g |
      awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m }' \
      >"$tmp/med_${tool}_$col"
  done
  printf 'median %-12s %8s MB/s %6s cpu us/MB %6s driver us/MB %6s in-plugin us/MB\n' \
    "$tool" "$(cat "$tmp/med_${tool}_2")" "$(cat "$tmp/med_${tool}_3")" \
    "$(cat "$tmp/med_${tool}_4")" "$(cat "$tmp/med_${tool}_5")"
done
echo "uptime: $(uptime)"
