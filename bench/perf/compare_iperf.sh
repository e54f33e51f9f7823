#!/bin/bash
# compare_iperf.sh [-D SECONDS] [-s MSG_BYTES] [-b BUILD_DIR] [-o OUT.md]
# Measures prism_perf against iperf3 (TCP and UDP) in the same run:
#   1. loopback ([::1]) in the current namespace;
#   2. across two network namespaces joined by two veth pairs (planes),
#      MTU 9000 (tests/udp/netns_fabric.sh builds and removes them):
#      prism over 1 plane (the same path as iperf3) and over 2 planes.
# Prints a markdown table (Gb/s and the ratio to iperf3 TCP on the same
# path) followed by the exact commands. Needs root for the netns part.
set -u
D=5 SIZE=65536 BUILD= OUT=
while getopts "D:s:b:o:" o; do
  case $o in D) D=$OPTARG ;; s) SIZE=$OPTARG ;; b) BUILD=$OPTARG ;; o) OUT=$OPTARG ;;
    *) echo "usage: $0 [-D s] [-s bytes] [-b build] [-o out.md]"; exit 1 ;; esac
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PERF=$BUILD/bin/prism_perf
[ -x "$PERF" ] || { echo "no $PERF (build target prism_perf)"; exit 1; }
command -v iperf3 >/dev/null || { echo "iperf3 not installed"; exit 1; }
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
PORT=$((20000 + RANDOM % 20000))

jget() { python3 -c "import json,sys; d=json.load(open('$1')); print($2)" 2>/dev/null || echo 0; }

# prism NAME NS_SERVER NS_CLIENT HOST SERVER_OPTS CLIENT_OPTS
prism() {
  local name=$1 nss=$2 nsc=$3 host=$4 sopt=$5 copt=$6
  local sx= cx=
  [ -n "$nss" ] && sx="ip netns exec $nss"; [ -n "$nsc" ] && cx="ip netns exec $nsc"
  PORT=$((PORT + 1))
  $sx "$PERF" -p $PORT $sopt --json > "$TMP/s.json" 2>"$TMP/s.err" &
  local sp=$!
  sleep 0.3
  local cmd="$PERF -p $PORT -s $SIZE -D $D $copt --json $host"
  $cx $cmd > "$TMP/c.json" 2>"$TMP/c.err"
  wait $sp
  local g=$(jget "$TMP/c.json" "round(d['gbps'],3)")
  echo "$name|prism_perf|$g" >> "$TMP/rows"
  echo "$name prism: server: ${sx:+$sx }$PERF -p $PORT $sopt ; client: ${cx:+$cx }$cmd" >> "$TMP/cmds"
  echo "$g"
}
# iperf NAME NS_SERVER NS_CLIENT HOST tcp|udp
iperf() {
  local name=$1 nss=$2 nsc=$3 host=$4 proto=$5 sx= cx=
  [ -n "$nss" ] && sx="ip netns exec $nss"; [ -n "$nsc" ] && cx="ip netns exec $nsc"
  PORT=$((PORT + 1))
  $sx iperf3 -s -1 -p $PORT > /dev/null 2>&1 &
  local sp=$!
  sleep 0.3
  local extra=
  [ "$proto" = udp ] && extra="-u -b 0 -l 8900"
  local cmd="iperf3 -c $host -p $PORT -t $D $extra -J"
  $cx $cmd > "$TMP/i.json" 2>/dev/null
  wait $sp
  local g
  if [ "$proto" = udp ]; then
    g=$(jget "$TMP/i.json" "round(d['end']['sum']['bits_per_second']*(1-d['end']['sum']['lost_percent']/100)/1e9,3)")
  else
    g=$(jget "$TMP/i.json" "round(d['end']['sum_received']['bits_per_second']/1e9,3)")
  fi
  echo "$name|iperf3 $proto|$g" >> "$TMP/rows"
  echo "$name iperf3 $proto: server: ${sx:+$sx }iperf3 -s -1 -p $PORT ; client: ${cx:+$cx }$cmd" >> "$TMP/cmds"
  echo "$g"
}
ratio() { python3 -c "print(f'{float($1)/float($2):.2f}' if float($2)>0 else '-')"; }

echo "## loopback [::1] (msg $SIZE B, $D s each)"
T=$(iperf loopback "" "" ::1 tcp); echo "  iperf3 tcp  $T Gb/s"
U=$(iperf loopback "" "" ::1 udp); echo "  iperf3 udp  $U Gb/s (goodput)"
P=$(prism loopback "" "" ::1 "-L ::1 -m 9000" "-L ::1 -m 9000 -P 64"); echo "  prism_perf  $P Gb/s  (x$(ratio $P $T) of iperf3 TCP)"
echo "loopback|ratio prism/iperf3-tcp|$(ratio $P $T)" >> "$TMP/rows"

NETNS_OK=1
if [ "$(id -u)" != 0 ]; then echo "skipping netns part: needs root"; NETNS_OK=0; fi
if [ $NETNS_OK = 1 ]; then
  export PERF SIZE D TMP
  cat > "$TMP/netns.sh" <<'INNER'
#!/bin/bash
A=$PRISM_NS_A B=$PRISM_NS_B
source "$TMP/funcs.sh"
echo "## netns pair, veth MTU 9000 (msg $SIZE B, $D s each)"
T=$(iperf "netns 1 plane" $B $A fd77:0::2 tcp); echo "  iperf3 tcp  $T Gb/s"
U=$(iperf "netns 1 plane" $B $A fd77:0::2 udp); echo "  iperf3 udp  $U Gb/s (goodput)"
P1=$(prism "netns 1 plane" $B $A fd77:0::2 "-L fd77:0::2 -m 9000" "-L fd77:0::1 -m 9000 -P 64"); echo "  prism_perf 1 plane  $P1 Gb/s (x$(ratio $P1 $T) of iperf3 TCP)"
P2=$(prism "netns 2 planes" $B $A fd77:0::2 "-L fd77:0::2,fd77:1::2 -m 9000" "-L fd77:0::1,fd77:1::1 -m 9000 -P 64"); echo "  prism_perf 2 planes $P2 Gb/s (x$(ratio $P2 $T) of iperf3 TCP, 1 plane)"
P3=$(prism "netns 2 planes gso" $B $A fd77:0::2 "-L fd77:0::2,fd77:1::2 -m 9000" "-L fd77:0::1,fd77:1::1 -m 9000 -P 64 --gso"); echo "  prism_perf 2 planes --gso $P3 Gb/s (x$(ratio $P3 $T) of iperf3 TCP, 1 plane)"
echo "netns|ratio prism(1 plane)/iperf3-tcp|$(ratio $P1 $T)" >> "$TMP/rows"
echo "netns|ratio prism(2 planes, gso)/iperf3-tcp(1 plane)|$(ratio $P3 $T)" >> "$TMP/rows"
echo "netns|ratio prism(2 planes)/iperf3-tcp(1 plane)|$(ratio $P2 $T)" >> "$TMP/rows"
INNER
  declare -f jget prism iperf ratio > "$TMP/funcs.sh"
  echo "PORT=$((PORT + 100))" >> "$TMP/funcs.sh"
  bash "$ROOT/tests/udp/netns_fabric.sh" 2 9000 bash "$TMP/netns.sh"
fi

{
  echo
  echo "| setup | tool | Gb/s |"
  echo "|---|---|---|"
  while read -r r; do echo "| ${r//|/ | } |"; done < "$TMP/rows"
  echo
  echo "Machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r), $(date -u +%FT%TZ)"
  echo
  echo "Commands:"
  while read -r c; do echo "- \`$c\`"; done < "$TMP/cmds"
} | tee ${OUT:+"$OUT"}
