#!/bin/bash
# Kernel SRv6 fabric test: Prism's encodings against Linux's SRv6 and
# Wireshark's dissector on a 2-plane, 2-spine fabric (tests/fabric/README
# in docs/routing.md). Usage: fabric_test.sh TOOL TOPO.json
# Exit 0 = pass, 1 = fail, 77 = skipped (not root / no netns / no SRv6).
#
# Checks:
#  1. every path h0 -> h1 (2 planes x 2 spines = 4), uSID carrier and SRH:
#     the datagrams arrive, and per-link tx counters moved on exactly the
#     links of that path, in the direction of travel, by exactly the count;
#  2. the receiving kernel verified every UDP checksum (Udp6InCsumErrors
#     stays 0 with checksum offload off), and a datagram whose checksum
#     covers the first instead of the final destination is rejected;
#  3. tshark on every link of a path decodes the SRH as encoded
#     (segleft, last_entry, addr list) and shows the uSID carrier's
#     destination shifted hop by hop;
#  4. a fabric link taken down loses exactly the paths through it, a spine
#     taken down loses exactly its paths, and both come back.
set -u
TOOL=$(readlink -f "$1") TOPO=$(readlink -f "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/fabric.sh"
fabric_require
command -v tshark >/dev/null || { echo "SKIPPED: tshark not installed"; exit 77; }

P="pf$$-"
WORK=$(mktemp -d /tmp/prism-fabric.XXXXXX)
RXPID=
cleanup() {
  [[ -n $RXPID ]] && kill "$RXPID" 2>/dev/null && wait "$RXPID" 2>/dev/null
  jobs -p | xargs -r kill 2>/dev/null
  fabric_down
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

FAILS=0
# PRISM_FABRIC_TIME_SCALE (default 1) multiplies the waits for tshark to
# start capturing: a VM under emulation (tests/rxe) needs several times more.
SCALE=${PRISM_FABRIC_TIME_SCALE:-1}
[[ $SCALE =~ ^[1-9][0-9]?$ ]] || { echo "FAIL: PRISM_FABRIC_TIME_SCALE=$SCALE (1-99)"; exit 1; }
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
fail() { echo "FAIL: $* [$(elapsed) s]"; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $* [$(elapsed) s]"; }

T0=$(date +%s.%N)
fabric_init "$TOOL" "$TOPO" "$P" || { echo "FAIL: plan"; exit 1; }
fabric_up || { echo "FAIL: fabric_up"; exit 1; }
echo "fabric up: ${#FAB_NODES[@]} namespaces, ${#FAB_LINK_IDS[@]} links ($(awk -v a="$T0" -v b="$(date +%s.%N)" "BEGIN{printf \"%.1f\", b-a}") s)"

SRC=0 DST=1 PORT=5000
"$TOOL" paths "$TOPO" $SRC $DST > "$WORK/paths" || { echo "FAIL: paths"; exit 1; }
NPATHS=$(wc -l < "$WORK/paths")
[[ $NPATHS == 4 ]] || fail "expected 4 paths (2 planes x 2 spines), got $NPATHS"
declare -A PLANE HOSTLINK HOPS SWITCHES
while read -r _ x plane hl hops sws; do
  PLANE[$x]=$plane HOSTLINK[$x]=$hl HOPS[$x]=$hops SWITCHES[$x]=$sws
done < "$WORK/paths"

RX="$WORK/rx"
: > "$RX"
fx h$DST "$TOOL" recv $PORT "$RX" &
RXPID=$!
for i in $(seq 50); do grep -q listening "$RX" && break; sleep 0.1; done
grep -q listening "$RX" || { echo "FAIL: receiver did not start"; exit 1; }

csum_errors() { fx h$DST awk '$1 == "Udp6InCsumErrors" {print $2}' /proc/net/snmp6; }
received() { grep -c "^$1 $2 " "$RX"; }  # mode path

# send MODE X COUNT [badcsum]: from h$SRC on the path's plane port.
send() {
  local mode=$1 x=$2 count=$3 l=${HOSTLINK[$2]} mac
  mac=$(fab_mac "${FAB_LB[$l]}" "b$l")
  fx h$SRC "$TOOL" send "$TOPO" $SRC $DST "$x" "$mode" "$count" "a$l" "$mac" $PORT ${4:-}
}

wait_rx() {  # mode x want -> waits up to 3 s for `want` datagrams
  local i
  for i in $(seq 60); do
    [[ $(received "$1" "$2") -ge $3 ]] && return 0
    sleep 0.05
  done
  return 1
}

# 1 + 2: every path, both encodings, exact per-link counters.
N=5
for mode in usid srh; do
  for ((x = 0; x < NPATHS; x++)); do
    fabric_counters > "$WORK/c0"
    before=$(received $mode $x)
    send $mode $x $N || fail "send $mode path $x"
    wait_rx $mode $x $((before + N)) || fail "$mode path $x: $(($(received $mode $x) - before))/$N arrived"
    sleep 0.1
    fabric_counters > "$WORK/c1"
    declare -A want=()
    for h in ${HOPS[$x]//,/ }; do
      id=${h%%:*} dir=${h#*:}
      [[ $dir == ab ]] && want[a$id]=$N || want[b$id]=$N
    done
    bad=$(join "$WORK/c0" "$WORK/c1" | while read -r dev t0 t1; do
      d=$((t1 - t0)) w=${want[$dev]:-0}
      [[ $d == "$w" ]] || echo "$dev:+$d(want +$w)"
    done)
    if [[ -n $bad ]]; then
      fail "$mode path $x (${SWITCHES[$x]}): counters $bad"
    else
      pass "$mode path $x plane ${PLANE[$x]} via ${SWITCHES[$x]}: $N/$N arrived over exactly links ${HOPS[$x]}"
    fi
    unset want
    # The receiver saw the final destination (host address on that plane).
    last=$(($(echo "${HOPS[$x]}" | tr ',' '\n' | wc -l) - 1))
    fin=$("$TOOL" expect "$TOPO" $SRC $DST "$x" usid $last)
    got=$(grep "^$mode $x " "$RX" | tail -1 | awk '{print $4}')
    [[ $got == "$fin" ]] || fail "$mode path $x: delivered to $got, want $fin"
  done
done
ce=$(csum_errors)
[[ $ce == 0 ]] && pass "receiver verified $((2 * NPATHS * N)) UDP checksums, 0 errors" ||
  fail "Udp6InCsumErrors = $ce"
send usid 0 1 badcsum
sleep 0.5
ce2=$(csum_errors)
[[ $ce2 == $((ce + 1)) ]] && pass "checksum over the carrier (not the final destination) rejected by the kernel" ||
  fail "bad checksum not detected (Udp6InCsumErrors $ce -> $ce2)"

# 3: tshark on every link of path 1.
X=1
hops=(${HOPS[$X]//,/ })
for mode in srh usid; do
  pids=()
  for i in "${!hops[@]}"; do
    id=${hops[$i]%%:*} dir=${hops[$i]#*:}
    node=${FAB_LA[$id]} dev=a$id
    [[ $dir == ba ]] && node=${FAB_LB[$id]} dev=b$id
    fx "$node" timeout $((25 * SCALE)) tshark -l -n -i "$dev" -f "ip6 proto 43 or udp port $PORT" -c 1 \
      -T fields -E separator='|' -e ipv6.dst -e ipv6.routing.segleft \
      -e ipv6.routing.srh.last_entry -e ipv6.routing.srh.addr \
      > "$WORK/ts.$mode.$i" 2> "$WORK/ts.$mode.$i.err" &
    pids+=($!)
  done
  for i in "${!hops[@]}"; do
    for t in $(seq $((200 * SCALE))); do grep -q "Capturing on" "$WORK/ts.$mode.$i.err" 2>/dev/null && break; sleep 0.1; done
  done
  # "Capturing on" can come a moment before the filter is live: keep sending
  # one datagram every 0.2 s until every capture has its packet.
  sleep 0.3
  for t in $(seq 100); do
    send $mode $X 1
    sleep 0.2
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ $alive == 0 ]] && break
  done
  for p in "${pids[@]}"; do wait "$p"; done
  for i in "${!hops[@]}"; do
    line=$(head -1 "$WORK/ts.$mode.$i")
    IFS='|' read -r dst segleft last addrs <<< "$line"
    if [[ $mode == usid ]]; then
      want=$("$TOOL" expect "$TOPO" $SRC $DST $X usid "$i")
      [[ $dst == "$want" && -z $segleft ]] && pass "tshark hop $i (${hops[$i]}): uSID ipv6.dst $dst" ||
        fail "tshark usid hop $i: got '$line', want dst $want"
    else
      read -r wsl wle waddrs <<< "$("$TOOL" expect "$TOPO" $SRC $DST $X srh "$i")"
      [[ $segleft == "$wsl" && $last == "$wle" && $addrs == "$waddrs" ]] &&
        pass "tshark hop $i (${hops[$i]}): segleft $segleft last_entry $last addr $addrs" ||
        fail "tshark srh hop $i: got '$line', want segleft $wsl last_entry $wle addr $waddrs"
    fi
  done
done

# 4: failures. Sends 3 per path and mode; returns the set that arrived.
round() {  # prints "mode:x" for every path that delivered all 3
  local mode x before
  declare -A b
  for mode in usid srh; do
    for ((x = 0; x < NPATHS; x++)); do b[$mode$x]=$(received $mode $x); send $mode $x 3; done
  done
  sleep 0.3
  for mode in usid srh; do
    for ((x = 0; x < NPATHS; x++)); do
      wait_rx $mode $x $((b[$mode$x] + 3)) && echo "$mode:$x"
    done
  done 2>/dev/null | sort | tr '\n' ' '
}
expect_alive() {  # label, predicate on path x (0 = lost) via "lost_if" function
  local label=$1 want="" mode x
  for mode in usid srh; do
    for ((x = 0; x < NPATHS; x++)); do lost_if "$x" || want+="$mode:$x"$'\n'; done
  done
  want=$(echo -n "$want" | sort | tr '\n' ' ')
  got=$(round)
  [[ $got == "$want" ]] && pass "$label: delivered exactly [$got]" ||
    fail "$label: delivered [$got], want [$want]"
}
L=$(echo "${HOPS[0]}" | cut -d, -f2 | cut -d: -f1)  # path 0's T0 -> T1 link
lost_if() { [[ ",${HOPS[$1]}," == *",$L:"* ]]; }
fabric_link_down "$L"
expect_alive "link $L (${FAB_LA[$L]}-${FAB_LB[$L]}) down"
fabric_link_up "$L" && fabric_wait_quiet
lost_if() { false; }
expect_alive "link $L back up"
S=$(echo "${SWITCHES[1]}" | cut -d, -f2)  # path 1's spine
lost_if() { [[ ",${SWITCHES[$1]}," == *",$S,"* ]]; }
fabric_switch_down "$S"
expect_alive "switch $S down"
fabric_switch_up "$S" && fabric_wait_quiet
lost_if() { false; }
expect_alive "switch $S back up"

echo "fabric test: $FAILS failure(s), $(awk -v a="$T0" -v b="$(date +%s.%N)" "BEGIN{printf \"%.1f\", b-a}") s"
[[ $FAILS == 0 ]]
