#!/bin/bash
# Runs INSIDE the VM (root, chroot on the read-only 9p view of the host /).
# Creates the soft-RoCE devices, then runs every test of the manifest.
#   rxe_lo           on lo                          one device, loopback
#   rxe_a1 / rxe_b1  on veth pair va1/vb1 (198.51.100.1/.2, TEST-NET-2)
#                    two devices, traffic really crosses the veth
#   rxe_gone         on dummy0 (192.0.2.1): the port-loss test takes dummy0 down
# Tests see PRISM_RXE=1 and PRISM_RXE_DEV / _DEV_A / _DEV_B / _DEV_LOSS(_NETDEV).
# Manifest lines: NAME<TAB>TIMEOUT_S<TAB>COMMAND (run with bash -c).
# Output: PASS/FAIL/SKIP lines on the console and in $RXE_OUT/results.txt,
# each test's output in $RXE_OUT/NAME.log; METRIC lines are copied through.
# Exit code: 0 when nothing failed.
OUT=${RXE_OUT:?}
MANIFEST=${1:?manifest}
T() { cut -d' ' -f1 /proc/uptime; }
# devtmpfs has no /dev/fd (udev makes it on a booted system): bash's process
# substitution, <(...), needs it.
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
: > "$OUT/results.txt"
echo "[guest] $(T)s: setting up rxe devices"
for m in rdma_rxe ib_uverbs veth; do
  [ -d /sys/module/$m ] || /run/rxe-modprobe $m || echo "[guest] module $m missing"
done
# ifb: the kernel SRv6 fabric's SID devices (tests/fabric); none created here.
[ -d /sys/module/ifb ] || /run/rxe-modprobe ifb numifbs=0 || echo "[guest] module ifb missing"
ip link set lo up
for i in all default; do sysctl -qw net.ipv4.conf.$i.rp_filter=0 net.ipv4.conf.$i.accept_local=1; done
# rxe in Debian's 6.1 only works in the initial netns: policy routing makes
# traffic between the two local veth addresses cross the veth instead of lo.
ip rule add pref 100 lookup local; ip rule del pref 0 lookup local
make_path() { # i -> va$i (198.51.100.$((2i-1))) <-> vb$i (198.51.100.$((2i)))
  local i=$1 A=198.51.100.$((2*$1-1)) B=198.51.100.$((2*$1))
  ip link add va$i type veth peer name vb$i
  ip link set va$i up; ip link set vb$i up
  ip addr add $A/32 dev va$i; ip addr add $B/32 dev vb$i
  for d in va$i vb$i; do sysctl -qw net.ipv4.conf.$d.rp_filter=0 net.ipv4.conf.$d.accept_local=1
    ip rule add pref 10 iif $d lookup local; done
  ip route add $B dev va$i table $((200+2*i)); ip rule add pref 20 to $B lookup $((200+2*i))
  ip route add $A dev vb$i table $((201+2*i)); ip rule add pref 20 to $A lookup $((201+2*i))
  ip neigh replace $B lladdr "$(cat /sys/class/net/vb$i/address)" dev va$i nud permanent
  ip neigh replace $A lladdr "$(cat /sys/class/net/va$i/address)" dev vb$i nud permanent
}
make_path 1
rdma link add rxe_lo type rxe netdev lo || echo "[guest] rdma link add rxe_lo failed"
rdma link add rxe_a1 type rxe netdev va1 || echo "[guest] rdma link add rxe_a1 failed"
rdma link add rxe_b1 type rxe netdev vb1 || echo "[guest] rdma link add rxe_b1 failed"
# a device whose link the port-loss test may take down
ip link add dummy0 type dummy && ip addr add 192.0.2.1/24 dev dummy0 && ip link set dummy0 up
rdma link add rxe_gone type rxe netdev dummy0 || echo "[guest] rdma link add rxe_gone failed"
# wait until the IPv4-mapped GIDs are in the tables
for t in $(seq 1 50); do
  n=$(cat /sys/class/infiniband/rxe_{lo,a1,b1,gone}/ports/1/gids/* 2>/dev/null | grep -c ':ffff:')
  [ "$n" -ge 4 ] && break; sleep 0.2
done
rdma link show
export PRISM_RXE=1 PRISM_RXE_DEV=rxe_lo PRISM_RXE_DEV_A=rxe_a1 PRISM_RXE_DEV_B=rxe_b1 PRISM_RXE_DEV_LOSS=rxe_gone PRISM_RXE_DEV_LOSS_NETDEV=dummy0
echo "[guest] $(T)s: running tests"
fail=0
while IFS=$'\t' read -r name to cmd; do
  [ -n "$name" ] || continue
  case "$name" in \#*) continue;; esac
  t0=$(T)
  timeout -k 5 "$to" bash -c "$cmd" > "$OUT/$name.log" 2>&1; rc=$?
  dt=$(awk "BEGIN{print $(T)-$t0}")
  if [ $rc = 0 ]; then
    ns=$(grep -c '^\[  SKIPPED \] .*(' "$OUT/$name.log")
    r="PASS: $name (${dt}s)"; [ "$ns" -gt 0 ] && r="PASS: $name (${dt}s, $ns gtest cases skipped)"
    grep '^\[  SKIPPED \] .*(' "$OUT/$name.log" | sed "s/^/  /" 
  elif [ $rc = 77 ]; then r="SKIP: $name (${dt}s)"
  else r="FAIL: $name (rc=$rc, ${dt}s)"; fail=$((fail+1))
    tail -n 40 "$OUT/$name.log"
  fi
  echo "$r" | tee -a "$OUT/results.txt"
  grep -h '^METRIC' "$OUT/$name.log" | tee -a "$OUT/results.txt"
done < "$MANIFEST"
echo "[guest] $(T)s: done, $fail failed"
[ $fail = 0 ]
