#!/bin/bash
# cpu_per_byte.sh VERBS_PERF PRISM_PERF - inside the rxe VM: CPU time per MB
# moved (the whole VM's busy time from /proc/stat: both processes, the
# Endpoint's loop threads and soft-RoCE's kernel work together) for
# ib_write_bw, verbs_perf (engine + datapath, one thread per side) and
# prism_perf --datapath verbs (the Endpoint API), all 65536 B x COUNT on
# rxe_lo, 8 paths on 8 QPs, one verbs_perf and one prism_perf run per
# chunk size in CHUNKS (default "65536 32768": the chunk before and since
# 2026-12-03; METRIC names end in _cC). Diagnosis tool for
# docs/verbs.md ("Where the Endpoint path loses"); not in the manifest. Run:
#   printf 'cpu\t600\tbash %s/tests/verbs/cpu_per_byte.sh %s/build/bin/verbs_perf %s/build/bin/prism_perf\n' \
#     $PWD $PWD $PWD > /tmp/m.txt && tests/rxe/run-rxe-vm.sh /tmp/m.txt /tmp/cpu-out
# Environment: COUNT (500), ROUNDS (2), CHUNKS ("65536 32768"), PP_EXTRA
# (more prism_perf options, e.g. "--spin=0"; the tag TAG names them in the
# METRIC lines).
# busy_s includes process start-up and connection set-up, so read the
# figures relative to each other (same VM run), not as absolute costs.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/vm_perf_opts.sh"
VPERF=${1:?verbs_perf}; PPERF=${2:?prism_perf}
DEV=${PRISM_RXE_DEV:-rxe_lo}; SIZE=65536; COUNT=${COUNT:-500}
[ -d /sys/class/infiniband/$DEV ] || { echo "SKIP: no RDMA device $DEV"; exit 77; }
GIDX=$(vm_roce_gid $DEV)
HZ=$(getconf CLK_TCK)
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
idle() { awk '/^cpu /{print $5+$6}' /proc/stat; }
report() { # name t0 b0 i0 MB/s
  local b1 i1 t1; b1=$(busy); i1=$(idle); t1=$(date +%s.%N)
  awk -v n="$1" -v b="$((b1-$3))" -v i="$((i1-$4))" -v hz="$HZ" -v w="$(awk "BEGIN{print $t1-$2}")" -v mb="$(awk "BEGIN{print $SIZE*$COUNT/1e6}")" -v r="$5" \
    'BEGIN{printf "METRIC cpu_%s busy_s %.2f idle_s %.2f wall_s %.2f cpu_ms_per_MB %.1f MBps %s\n", n, b/hz, i/hz, w, 1000*b/hz/mb, r}'
}
port=18515
run_ib() {
  port=$((port+1)); local t0 b0 i0; t0=$(date +%s.%N); b0=$(busy); i0=$(idle)
  ib_write_bw -d $DEV -x $GIDX -F -s $SIZE -n $COUNT -p $port > /tmp/ibs 2>&1 & spid=$!
  for i in $(seq 1 300); do ss -Hltn "sport = :$port" | grep -q . && break; sleep 0.1; done
  ib_write_bw -d $DEV -x $GIDX -F -s $SIZE -n $COUNT -p $port 127.0.0.1 > /tmp/ibc 2>&1
  wait $spid
  report ib_write_bw "$t0" "$b0" "$i0" "$(awk '/^ *#bytes/{h=1;next} h&&NF>=4{print $4; exit}' /tmp/ibc)"
}
run_vp() { # chunk
  local t0 b0 i0; t0=$(date +%s.%N); b0=$(busy); i0=$(idle)
  "$VPERF" --device $DEV --size $SIZE --count $COUNT --qps 8 --paths 8 --chunk $1 --depth 128 > /tmp/vp 2>&1
  report verbs_perf_c$1 "$t0" "$b0" "$i0" "$(awk '/^METRIC verbs_perf_MBps/{print $3}' /tmp/vp)"
}
run_pp() { # chunk
  local PP="--datapath verbs --device $DEV --qps 8 --paths 8 -s $SIZE -t 128 $VM_PP_OPTS --mtu-payload $1 ${PP_EXTRA:-}"
  local t0 b0 i0; t0=$(date +%s.%N); b0=$(busy); i0=$(idle)
  PRISM_VERBS_STATS=1 "$PPERF" $PP -n $COUNT -p 18600 > /tmp/pps 2>&1 & local ppid=$!
  for i in $(seq 1 300); do ss -Hltn "sport = :18600" | grep -q . && break; sleep 0.1; done
  PRISM_VERBS_STATS=1 timeout 120 "$PPERF" $PP -n $COUNT -p 18600 --json 127.0.0.1 > /tmp/ppc 2>&1
  wait $ppid
  report prism_perf_c$1${TAG:-} "$t0" "$b0" "$i0" "$(grep -o '"MBps": *[0-9.]*' /tmp/ppc | grep -o '[0-9.]*$')"
  grep -h 'prism verbs stats' /tmp/pps /tmp/ppc | sed "s/^/c$1 /"
}
for round in $(seq 1 ${ROUNDS:-2}); do
  run_ib
  for c in ${CHUNKS:-65536 32768}; do run_vp $c; run_pp $c; done
done
run_ib
