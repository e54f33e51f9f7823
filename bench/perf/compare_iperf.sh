#!/bin/bash
# compare_iperf.sh [-D SECONDS] [-s MSG_BYTES] [-b BUILD_DIR] [-o OUT.md]
#                  [-N NICE] [-c SERVER_CPU,CLIENT_CPU] [-q]
# Measures prism_perf against iperf3 (TCP and UDP) in the same run:
#   1. loopback ([::1], MTU 65536) in the current namespace;
#   2. two network namespaces joined by two veth pairs (planes) at MTU 9000
#      and again at MTU 65535 (tests/udp/netns_fabric.sh builds and removes
#      them): prism over 1 plane (the same path as iperf3) and over 2 planes.
# prism_perf takes the payload size from the interface MTU (-m auto) and
# uses UDP GSO + GRO; one "-m 9000 --no-gso --no-gro" row per setup shows
# the previous configuration, and one "receiver --in-place" row per setup the
# receive-in-place path (payload read straight into the region, no GRO).
# Fairness: every tool runs one stream (one connection / one iperf3 stream)
# between one server and one client process, with the same nice level (-N)
# and, with -c, the server pinned to one CPU and the client to another
# (taskset; prism_perf's loop threads and iperf3 alike). CPU cost is the
# user+system time of both processes (prism_perf's getrusage, iperf3's
# cpu_utilization_percent x duration) per GB delivered.
# Prints a markdown table (Gb/s, CPU s/GB, retransmissions, ratio to iperf3
# TCP on the same path) followed by the machine load and exact commands.
# Needs root for the netns part. -q: loopback only.
set -u
D=5 SIZE=65536 BUILD= OUT= NICE=0 CPUS= QUICK=0
while getopts "D:s:b:o:N:c:q" o; do
  case $o in D) D=$OPTARG ;; s) SIZE=$OPTARG ;; b) BUILD=$OPTARG ;; o) OUT=$OPTARG ;;
    N) NICE=$OPTARG ;; c) CPUS=$OPTARG ;; q) QUICK=1 ;;
    *) echo "usage: $0 [-D s] [-s bytes] [-b build] [-o out.md] [-N nice] [-c scpu,ccpu] [-q]"; exit 1 ;; esac
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PERF=$BUILD/bin/prism_perf
[ -x "$PERF" ] || { echo "no $PERF (build target prism_perf)"; exit 1; }
command -v iperf3 >/dev/null || { echo "iperf3 not installed"; exit 1; }
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
PORT=$((20000 + RANDOM % 20000))
# Launch prefixes for the server and the client: same nice, optional pinning.
SPRE="nice -n $NICE" CPRE="nice -n $NICE"
if [ -n "$CPUS" ]; then
  SPRE+=" taskset -c ${CPUS%,*}"; CPRE+=" taskset -c ${CPUS#*,}"
fi
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

jget() { python3 -c "import json,sys; d=json.load(open('$1')); print($2)" 2>/dev/null || echo 0; }

# prism NAME NS_SERVER NS_CLIENT HOST SERVER_OPTS CLIENT_OPTS [LABEL]
prism() {
  local name=$1 nss=$2 nsc=$3 host=$4 sopt=$5 copt=$6 label=${7:-}
  local sx= cx=
  [ -n "$nss" ] && sx="ip netns exec $nss"; [ -n "$nsc" ] && cx="ip netns exec $nsc"
  PORT=$((PORT + 1))
  rm -f "$TMP/s.json" "$TMP/c.json"
  $sx $SPRE "$PERF" -p $PORT $sopt --json > "$TMP/s.json" 2>"$TMP/s.err" &
  local sp=$!
  sleep 0.3
  local cmd="$PERF -p $PORT -s $SIZE -D $D $copt --json $host"
  $cx $CPRE $cmd > "$TMP/c.json" 2>"$TMP/c.err"
  wait $sp
  local g=$(jget "$TMP/c.json" "round(d['gbps'],3)")
  local cpu=$(python3 -c "
import json
try:
  c=json.load(open('$TMP/c.json')); s=json.load(open('$TMP/s.json'))
  print(round((c['cpu_seconds']+s['cpu_seconds'])/(c['bytes']/1e9),2))
except Exception: print('-')")
  local rtx=$(jget "$TMP/c.json" "d['retransmitted_packets']")
  local mtu=$(jget "$TMP/c.json" "d['mtu_payload']")
  echo "$name|prism_perf ${label:-$copt}|$g|$cpu|$rtx (payload $mtu B)" >> "$TMP/rows"
  echo "$name prism: server: ${sx:+$sx }$SPRE $PERF -p $PORT $sopt ; client: ${cx:+$cx }$CPRE $cmd" >> "$TMP/cmds"
  echo "$g"
}
# iperf NAME NS_SERVER NS_CLIENT HOST tcp|udp
iperf() {
  local name=$1 nss=$2 nsc=$3 host=$4 proto=$5 sx= cx=
  [ -n "$nss" ] && sx="ip netns exec $nss"; [ -n "$nsc" ] && cx="ip netns exec $nsc"
  PORT=$((PORT + 1))
  rm -f "$TMP/i.json"
  $sx $SPRE iperf3 -s -1 -p $PORT > /dev/null 2>&1 &
  local sp=$!
  sleep 0.3
  local extra=
  [ "$proto" = udp ] && extra="-u -b 0 -l 8900"
  local cmd="iperf3 -c $host -p $PORT -t $D $extra -J"
  $cx $CPRE $cmd > "$TMP/i.json" 2>/dev/null
  wait $sp
  local g rtx
  if [ "$proto" = udp ]; then
    g=$(jget "$TMP/i.json" "round(d['end']['sum']['bits_per_second']*(1-d['end']['sum']['lost_percent']/100)/1e9,3)")
    rtx=$(jget "$TMP/i.json" "str(round(d['end']['sum']['lost_percent'],1))+'% lost'")
  else
    g=$(jget "$TMP/i.json" "round(d['end']['sum_received']['bits_per_second']/1e9,3)")
    rtx=$(jget "$TMP/i.json" "d['end']['sum_sent'].get('retransmits',0)")
  fi
  local cpu=$(jget "$TMP/i.json" "round((d['end']['cpu_utilization_percent']['host_total']+d['end']['cpu_utilization_percent']['remote_total'])/100*$D/($g*$D/8) if $g>0 else 0,2)")
  echo "$name|iperf3 $proto|$g|$cpu|$rtx" >> "$TMP/rows"
  echo "$name iperf3 $proto: server: ${sx:+$sx }$SPRE iperf3 -s -1 -p $PORT ; client: ${cx:+$cx }$CPRE $cmd" >> "$TMP/cmds"
  echo "$g"
}
ratio() { python3 -c "print(f'{float($1)/float($2):.2f}' if float($2)>0 else '-')"; }

echo "## loopback [::1] (msg $SIZE B, $D s each)"
T=$(iperf loopback "" "" ::1 tcp); echo "  iperf3 tcp  $T Gb/s"
U=$(iperf loopback "" "" ::1 udp); echo "  iperf3 udp  $U Gb/s (goodput)"
P=$(prism loopback "" "" ::1 "-L ::1" "-L ::1"); echo "  prism_perf  $P Gb/s  (x$(ratio $P $T) of iperf3 TCP)"
I=$(prism loopback "" "" ::1 "-L ::1 --in-place" "-L ::1" "-L ::1, receiver --in-place"); echo "  prism_perf receiver --in-place  $I Gb/s  (x$(ratio $I $T) of iperf3 TCP)"
O=$(prism loopback "" "" ::1 "-L ::1 -m 9000 --no-gro" "-L ::1 -m 9000 --no-gso --no-gro"); echo "  prism_perf -m 9000 --no-gso --no-gro  $O Gb/s"
echo "loopback|ratio prism/iperf3-tcp|$(ratio $P $T)||" >> "$TMP/rows"
echo "loopback|ratio prism --in-place/iperf3-tcp|$(ratio $I $T)||" >> "$TMP/rows"

NETNS_OK=1
[ $QUICK = 1 ] && NETNS_OK=0
if [ $NETNS_OK = 1 ] && [ "$(id -u)" != 0 ]; then echo "skipping netns part: needs root"; NETNS_OK=0; fi
if [ $NETNS_OK = 1 ]; then
  export PERF SIZE D TMP SPRE CPRE
  cat > "$TMP/netns.sh" <<'INNER'
#!/bin/bash
A=$PRISM_NS_A B=$PRISM_NS_B M=$1
source "$TMP/funcs.sh"
PORT=$((PORT + M % 1000))
echo "## netns pair, veth MTU $M (msg $SIZE B, $D s each)"
T=$(iperf "netns mtu $M, 1 plane" $B $A fd77:0::2 tcp); echo "  iperf3 tcp  $T Gb/s"
if [ "$M" = 9000 ]; then
  U=$(iperf "netns mtu $M, 1 plane" $B $A fd77:0::2 udp); echo "  iperf3 udp  $U Gb/s (goodput)"
fi
P1=$(prism "netns mtu $M, 1 plane" $B $A fd77:0::2 "-L fd77:0::2" "-L fd77:0::1"); echo "  prism_perf 1 plane  $P1 Gb/s (x$(ratio $P1 $T) of iperf3 TCP)"
I1=$(prism "netns mtu $M, 1 plane" $B $A fd77:0::2 "-L fd77:0::2 --in-place" "-L fd77:0::1" "-L fd77:0::1, receiver --in-place"); echo "  prism_perf 1 plane, receiver --in-place  $I1 Gb/s (x$(ratio $I1 $T) of iperf3 TCP)"
P2=$(prism "netns mtu $M, 2 planes" $B $A fd77:0::2 "-L fd77:0::2,fd77:1::2" "-L fd77:0::1,fd77:1::1"); echo "  prism_perf 2 planes $P2 Gb/s (x$(ratio $P2 $T) of iperf3 TCP, 1 plane)"
if [ "$M" = 9000 ]; then
  P0=$(prism "netns mtu $M, 1 plane" $B $A fd77:0::2 "-L fd77:0::2 --no-gro" "-L fd77:0::1 --no-gso --no-gro"); echo "  prism_perf 1 plane --no-gso --no-gro $P0 Gb/s"
fi
echo "netns mtu $M|ratio prism(1 plane)/iperf3-tcp|$(ratio $P1 $T)||" >> "$TMP/rows"
echo "netns mtu $M|ratio prism(1 plane, --in-place)/iperf3-tcp|$(ratio $I1 $T)||" >> "$TMP/rows"
echo "netns mtu $M|ratio prism(2 planes)/iperf3-tcp(1 plane)|$(ratio $P2 $T)||" >> "$TMP/rows"
INNER
  declare -f jget prism iperf ratio > "$TMP/funcs.sh"
  echo "PORT=$((PORT + 100))" >> "$TMP/funcs.sh"
  bash "$ROOT/tests/udp/netns_fabric.sh" 2 9000 bash "$TMP/netns.sh" 9000
  bash "$ROOT/tests/udp/netns_fabric.sh" 2 65535 bash "$TMP/netns.sh" 65535
fi

{
  echo
  echo "| setup | tool | Gb/s | CPU s/GB (both ends) | retransmits |"
  echo "|---|---|---|---|---|"
  while read -r r; do echo "| ${r//|/ | } |"; done < "$TMP/rows"
  echo
  echo "Machine: $(nproc) cores, load before $LOAD0, after $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r), $(date -u +%FT%TZ); nice $NICE${CPUS:+, server on CPU ${CPUS%,*}, client on CPU ${CPUS#*,}}"
  echo
  echo "Commands:"
  while read -r c; do echo "- \`$c\`"; done < "$TMP/cmds"
} | tee ${OUT:+"$OUT"}
