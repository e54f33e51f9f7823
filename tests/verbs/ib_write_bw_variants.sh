#!/bin/bash
# ib_write_bw_variants.sh - inside the rxe VM: ib_write_bw alone, in ROUNDS
# (default 3) rounds of five variants (RC 1 QP, RC 8 QPs, UC 1 QP, UC 8 QPs,
# RC 1 QP with TX depth 32), 65536 B x COUNT (500) per QP on rxe_lo, with
# the whole VM's busy seconds (/proc/stat) per run. Diagnosis tool for
# docs/verbs.md ("Is it the 8 QPs or UC?"); not in the manifest. Run:
#   printf 'ibvar\t500\tbash %s/tests/verbs/ib_write_bw_variants.sh\n' $PWD > /tmp/m.txt &&
#     tests/rxe/run-rxe-vm.sh /tmp/m.txt /tmp/ibvar-out
set -u
source "$(dirname "${BASH_SOURCE[0]}")/vm_perf_opts.sh"
DEV=${PRISM_RXE_DEV:-rxe_lo}; SIZE=65536; COUNT=${COUNT:-500}; ROUNDS=${ROUNDS:-3}
[ -d /sys/class/infiniband/$DEV ] || { echo "SKIP: no RDMA device $DEV"; exit 77; }
GIDX=$(vm_roce_gid $DEV)
HZ=$(getconf CLK_TCK)
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
port=18600
run() { # NAME [ib_write_bw options]
  local n=$1; shift; port=$((port+1)); local b0 b1 rc bw; b0=$(busy)
  ib_write_bw -d $DEV -x $GIDX -F -s $SIZE -n $COUNT -p $port "$@" > /tmp/ibs 2>&1 & spid=$!
  for i in $(seq 1 300); do ss -Hltn "sport = :$port" | grep -q . && break; sleep 0.1; done
  ib_write_bw -d $DEV -x $GIDX -F -s $SIZE -n $COUNT -p $port "$@" 127.0.0.1 > /tmp/ibc 2>&1; rc=$?
  wait $spid; b1=$(busy)
  bw=$(awk '/^ *#bytes/{h=1;next} h&&NF>=4{print $4; exit}' /tmp/ibc)
  echo "METRIC ib_write_bw_$n rc=$rc MBps=$bw busy_s=$(awk "BEGIN{print ($b1-$b0)/$HZ}")"
  [ $rc = 0 ] || { tail -5 /tmp/ibc; return 1; }
}
fail=0
for r in $(seq 1 $ROUNDS); do
  run RC1 || fail=1
  run RC8 -q 8 || fail=1
  run UC1 -c UC || fail=1
  run UC8 -c UC -q 8 || fail=1
  run RC1_tx32 -t 32 || fail=1
done
exit $fail
