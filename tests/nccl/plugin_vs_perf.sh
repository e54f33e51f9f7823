#!/usr/bin/env bash
# Cost of the NCCL plugin layer: the mini-NCCL driver through the plugin
# (nccl_plugin_perf) against Prism's own prism_perf, same data path (Prism
# over UDP on ::1), same engine and datapath options, runs alternated.
#
#   tests/nccl/plugin_vs_perf.sh [rounds=7] [size=1048576] [msgs=400] [depth=32]
#   B=build-dir (default build), TX_MODE=auto|raw|sockets (default auto),
#   GSO=1|0 and GRO=1|0 (default 1, prism_perf's defaults), RTO_MIN_US and
#   PROBE_US (default 50 and 50: the plugin's engine defaults; prism_perf's
#   own are 4000 and 1000), IN_PLACE=0|1 (default 0: receive in place,
#   PRISM_UDP_RX_IN_PLACE / --in-place), IDLE_US (default 0: the drivers of
#   the plugin and ep_poll rows sched_yield between idle polls as NCCL's
#   proxy does; N: they sleep N us instead, which takes the idle spinning out
#   of their CPU time; prism_perf blocks either way).
#
# Per run: MB/s (plugin: at the receiver; prism_perf: at the client) and the
# CPU time of both processes together (perf stat task-clock, children
# included) per MB moved; for the plugin also the part of it spent on the two
# driver threads (the mini-NCCL loops, the plugin calls and NCCL-style
# sched_yield polling between them), the rest being Prism's endpoint loop
# threads, and the wall time spent inside isend/irecv/test calls (the plugin
# layer plus the Prism endpoint calls it makes). Between the two,
# `plugin_1p`: the same with the sender a thread of the receiver's process
# (PRISM_NCCL_PERF_THREADS=1) on a second device (its own endpoint), and `ep_poll` (endpoint_poll_perf): those
# same two sched_yield-polling driver threads in one process over
# prism::Endpoint directly, without the plugin. plugin_1p - ep_poll is the
# plugin layer; plugin vs prism_perf the end-to-end comparison (two
# processes each). The order of the four rotates every round; each line carries the
# 1-minute load average when it started. Prints every run and the medians.
#
# Matching options on both tools: 64 paths, 9000-byte link MTU,
# WRITE-with-immediate, `depth` outstanding, base RTT 100 us, tx mode, GSO,
# GRO, RTO floor and probe interval as above (the plugin through PRISM_*
# variables, prism_perf through its flags).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build}
ROUNDS=${1:-7}
SIZE=${2:-1048576}
MSGS=${3:-400}
DEPTH=${4:-32}
TX_MODE=${TX_MODE:-auto}
GSO=${GSO:-1}
GRO=${GRO:-1}
RTO_MIN_US=${RTO_MIN_US:-50}
PROBE_US=${PROBE_US:-50}
IDLE_US=${IDLE_US:-0}
IN_PLACE=${IN_PLACE:-0}
MB=$(awk -v s="$SIZE" -v m="$MSGS" 'BEGIN { print s * m / 1e6 }')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

task_ms() {  # perf stat -x, output -> task-clock msec
  awk -F, '/task-clock/ { print $1 }' "$1"
}

load1() { awk '{ print $1 }' /proc/loadavg; }

# $2: "plugin" (sender exec'd: two processes) or "plugin_1p" (sender a
# thread of the receiver's process, PRISM_NCCL_PERF_THREADS=1).
run_plugin() {
  local r=$1 tool=$2 load mbs cpu drv inp threads=0 addrs=127.0.0.1
  # One process: the sender on device 1 (its own endpoint and loop thread).
  [ "$tool" = plugin_1p ] && threads=1 addrs=127.0.0.1,127.0.0.2
  load=$(load1)
  perf stat -x, -e task-clock -o "$tmp/ps" env PRISM_ADDRS=$addrs \
    PRISM_NCCL_PERF_THREADS=$threads \
    PRISM_PATHS=64 PRISM_LINK_MTU=9000 PRISM_UDP_TX_MODE="$TX_MODE" \
    PRISM_UDP_GSO="$GSO" PRISM_UDP_GRO="$GRO" PRISM_UDP_RX_IN_PLACE="$IN_PLACE" PRISM_RTO_MIN_US="$RTO_MIN_US" \
    PRISM_PROBE_US="$PROBE_US" PRISM_BASE_RTT_US=100 \
    PRISM_NCCL_PERF_IDLE_US="$IDLE_US" \
    LD_LIBRARY_PATH="$B/lib" "$B/bin/nccl_plugin_perf" "$SIZE" "$MSGS" \
    "$DEPTH" >"$tmp/po" 2>&1 || { cat "$tmp/po"; exit 1; }
  mbs=$(sed -n 's/.*: \([0-9.]*\) MB\/s.*/\1/p' "$tmp/po")
  cpu=$(awk -v t="$(task_ms "$tmp/ps")" -v mb="$MB" 'BEGIN { printf "%.0f", t * 1000 / mb }')
  # "... in plugin calls X s ..., ... driver thread Y s" from both sides.
  read -r drv inp < <(awk -v mb="$MB" '{
      for (i = 1; i < NF; ++i) {
        if ($i == "thread") { j = i + 1; if ($j == "cpu") ++j; d += $j + 0 }
        if ($i == "calls" && $(i - 1) == "plugin") p += $(i + 1) + 0
      } } END { printf "%.0f %.0f\n", d * 1e6 / mb, p * 1e6 / mb }' "$tmp/po")
  printf '%-5s %-12s %6s %10s %12s %14s %14s\n' "$r" "$tool" "$load" "$mbs" \
    "$cpu" "$drv" "$inp"
  echo "$tool $mbs $cpu $drv $inp" >>"$tmp/all"
}

run_perf() {
  local r=$1 load mbs cpu port opts gso_flag gro_flag=""
  load=$(load1)
  port=$((19000 + RANDOM % 2000))
  gso_flag=$([ "$GSO" = 1 ] && echo --gso || echo --no-gso)
  [ "$GRO" = 1 ] || gro_flag=--no-gro
  [ "$IN_PLACE" = 1 ] && gro_flag+=" --in-place"
  opts="-s $SIZE -n $MSGS -t $DEPTH --immediate -P 64 -m 9000"
  opts+=" --rto-min=$RTO_MIN_US --probe-interval=$PROBE_US --base-rtt=100"
  opts+=" --tx-mode=$TX_MODE $gso_flag $gro_flag -p $port --json"
  perf stat -x, -e task-clock -o "$tmp/qs" bash -c \
    "'$B/bin/prism_perf' $opts >'$tmp/qsrv' 2>&1 & srv=\$!; sleep 0.3;
     '$B/bin/prism_perf' $opts ::1 >'$tmp/qo' 2>&1; rc=\$?; wait \$srv; exit \$rc" ||
    { cat "$tmp/qo" "$tmp/qsrv"; exit 1; }
  mbs=$(sed -n 's/.*"MBps": \([0-9.]*\).*/\1/p' "$tmp/qo")
  cpu=$(awk -v t="$(task_ms "$tmp/qs")" -v mb="$MB" 'BEGIN { printf "%.0f", t * 1000 / mb }')
  printf '%-5s %-12s %6s %10s %12s %14s %14s\n' "$r" prism_perf "$load" \
    "$mbs" "$cpu" - -
  echo "prism_perf $mbs $cpu 0 0" >>"$tmp/all"
}

# The plugin's polling driver over prism::Endpoint without the plugin.
run_poll() {
  local r=$1 load mbs cpu drv
  load=$(load1)
  perf stat -x, -e task-clock -o "$tmp/es" env PRISM_PATHS=64 \
    PRISM_LINK_MTU=9000 PRISM_UDP_TX_MODE="$TX_MODE" PRISM_UDP_GSO="$GSO" \
    PRISM_UDP_GRO="$GRO" PRISM_UDP_RX_IN_PLACE="$IN_PLACE" PRISM_RTO_MIN_US="$RTO_MIN_US" \
    PRISM_PROBE_US="$PROBE_US" PRISM_BASE_RTT_US=100 \
    PRISM_NCCL_PERF_IDLE_US="$IDLE_US" \
    "$B/bin/endpoint_poll_perf" "$SIZE" "$MSGS" "$DEPTH" >"$tmp/eo" 2>&1 ||
    { cat "$tmp/eo"; exit 1; }
  mbs=$(sed -n 's/.*: \([0-9.]*\) MB\/s.*/\1/p' "$tmp/eo")
  cpu=$(awk -v t="$(task_ms "$tmp/es")" -v mb="$MB" 'BEGIN { printf "%.0f", t * 1000 / mb }')
  drv=$(sed -n 's/.*driver threads \([0-9.]*\) us.*/\1/p' "$tmp/eo")
  printf '%-5s %-12s %6s %10s %12s %14s %14s\n' "$r" ep_poll "$load" \
    "$mbs" "$cpu" "$drv" -
  echo "ep_poll $mbs $cpu $drv 0" >>"$tmp/all"
}

echo "uptime: $(uptime)"
echo "options: size $SIZE msgs $MSGS depth $DEPTH tx $TX_MODE gso $GSO gro $GRO" \
  "in_place $IN_PLACE rto_min $RTO_MIN_US us probe $PROBE_US us idle_us $IDLE_US"
printf '%-5s %-12s %6s %10s %12s %14s %14s\n' run tool load MB/s "cpu us/MB" \
  "driver us/MB" "in-plugin us/MB"
for r in $(seq "$ROUNDS"); do
  case $((r % 4)) in
    1) run_plugin "$r" plugin; run_poll "$r"; run_perf "$r"; run_plugin "$r" plugin_1p ;;
    2) run_perf "$r"; run_plugin "$r" plugin_1p; run_plugin "$r" plugin; run_poll "$r" ;;
    3) run_poll "$r"; run_plugin "$r" plugin; run_plugin "$r" plugin_1p; run_perf "$r" ;;
    0) run_plugin "$r" plugin_1p; run_perf "$r"; run_poll "$r"; run_plugin "$r" plugin ;;
  esac
done
for tool in plugin prism_perf plugin_1p ep_poll; do
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
