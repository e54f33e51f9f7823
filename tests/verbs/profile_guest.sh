#!/bin/bash
# profile_guest.sh VERBS_PERF PRISM_PERF - inside the rxe VM: system-wide
# `perf record -e cpu-clock` (a software event: it works under QEMU TCG) of
# verbs_perf and of prism_perf --datapath verbs, same transfer as
# cpu_per_byte.sh (65536 B x COUNT on rxe_lo, 32 KiB chunks, 8 paths on 8
# QPs, VM_PP_OPTS), and per run: samples by process/thread, by DSO, and the
# top symbols, plus the datapath counters (PRISM_VERBS_STATS=1). Diagnosis
# tool for docs/verbs.md ("Where the Endpoint path loses"); not in the
# manifest. Run:
#   printf 'prof\t600\tbash %s/tests/verbs/profile_guest.sh %s/build/bin/verbs_perf %s/build/bin/prism_perf\n' \
#     $PWD $PWD $PWD > /tmp/m.txt && tests/rxe/run-rxe-vm.sh /tmp/m.txt /tmp/prof-out
# Output in /tmp/prof-out/prof.log. Environment: COUNT (500), PP_EXTRA (more
# prism_perf options), RUNS ("vp pp": which runs, in order; see the end),
# TOP (40), PERF_G ("-g": kernel call chains), VP_CHUNK (verbs_perf's chunk,
# 32768), FAIR=1 (see below).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/vm_perf_opts.sh"
VPERF=${1:?verbs_perf}; PPERF=${2:?prism_perf}
DEV=${PRISM_RXE_DEV:-rxe_lo}; SIZE=65536; COUNT=${COUNT:-500}
# FAIR=1: what compare_bw.sh has compared since 2026-12-03 (verbs_perf with
# 64 KiB chunks, prism_perf with VM_PP_OPTS_FAIR: 8 MiB in flight).
PP_BASE=$VM_PP_OPTS
[ "${FAIR:-0}" = 1 ] && { PP_BASE=$VM_PP_OPTS_FAIR; VP_CHUNK=${VP_CHUNK:-65536}; }
[ -d /sys/class/infiniband/$DEV ] || { echo "SKIP: no RDMA device $DEV"; exit 77; }
command -v perf >/dev/null || { echo "SKIP: perf missing"; exit 77; }
echo 0 > /proc/sys/kernel/kptr_restrict 2>/dev/null
echo -1 > /proc/sys/kernel/perf_event_paranoid 2>/dev/null
# perf data and the guest's kallsyms are kept in $RXE_OUT (the VM rig's
# shared output folder) for `perf report -i F --kallsyms K` afterwards.
D=${RXE_OUT:-/tmp}/prof; mkdir -p $D; cat /proc/kallsyms > $D/kallsyms
ctxt() { awk '/^ctxt/{print $2}' /proc/stat; }
report() { # name
  echo "=== $1: by thread (comm, pid)"
  perf report -i $D/$1.data --stdio --no-children --sort comm,pid 2>/dev/null | grep -v '^#' | grep -v '^$' | head -20
  echo "=== $1: by comm, dso"
  perf report -i $D/$1.data --stdio --no-children --sort comm,dso 2>/dev/null | grep -v '^#' | grep -v '^$' | head -25
  echo "=== $1: top symbols"
  perf report -i $D/$1.data --stdio --no-children --sort comm,dso,sym 2>/dev/null | grep -v '^#' | grep -v '^$' | head -${TOP:-40}
  echo "=== $1: top symbols of each busy thread"
  perf report -i $D/$1.data --stdio --no-children --sort pid 2>/dev/null | awk '!/^#/ && NF>=2 && $1+0 >= 3 {print $2}' | grep -v '^0:' |
  while read -r t; do
    echo "--- thread $t"
    perf report -i $D/$1.data --stdio --no-children --tid ${t%%:*} --sort dso,sym 2>/dev/null | grep -v '^#' | grep -v '^$' | head -15
  done
}
run_ib() {
  local GIDX c0; GIDX=$(vm_roce_gid $DEV); c0=$(ctxt)
  ib_write_bw -d $DEV -x $GIDX -F -s $SIZE -n $COUNT -p 18515 > /tmp/ibs 2>&1 & local spid=$!
  for i in $(seq 1 300); do ss -Hltn "sport = :18515" | grep -q . && break; sleep 0.1; done
  perf record -q -a ${PERF_G:-} -e cpu-clock -F 1000 -o $D/ib.data -- \
    ib_write_bw -d $DEV -x $GIDX -F -s $SIZE -n $COUNT -p 18515 127.0.0.1 > /tmp/ibc 2>&1
  wait $spid
  echo "METRIC ib_context_switches $(( $(ctxt) - c0 ))"
  echo "METRIC ib_write_bw_MBps $(awk '/^ *#bytes/{h=1;next} h&&NF>=4{print $4; exit}' /tmp/ibc)"
  report ib
}
run_vp() {
  local c0; c0=$(ctxt)
  perf record -q -a ${PERF_G:-} -e cpu-clock -F 1000 -o $D/vp.data -- \
    "$VPERF" --device $DEV --size $SIZE --count $COUNT --qps 8 --paths 8 --chunk ${VP_CHUNK:-32768} --depth 128 > /tmp/vp 2>&1
  echo "METRIC vp_context_switches $(( $(ctxt) - c0 ))"; grep METRIC /tmp/vp
  report vp
}
run_pp() {
  local PP="--datapath verbs --device $DEV --qps 8 --paths 8 -s $SIZE -t 128 $PP_BASE ${PP_EXTRA:-}"
  PRISM_VERBS_STATS=1 "$PPERF" $PP -n $COUNT -p 18600 > /tmp/pps 2>&1 & local ppid=$!
  for i in $(seq 1 300); do ss -Hltn "sport = :18600" | grep -q . && break; sleep 0.1; done
  local c0; c0=$(ctxt)
  # Record from here (server waiting, connection not yet made) to the end.
  perf record -q -a ${PERF_G:-} -e cpu-clock -F 1000 -o $D/pp${TAG:-}.data -- \
    env PRISM_VERBS_STATS=1 timeout 120 "$PPERF" $PP -n $COUNT -p 18600 --json 127.0.0.1 > /tmp/ppc 2>&1
  wait $ppid
  echo "METRIC pp${TAG:-}_context_switches $(( $(ctxt) - c0 ))"
  echo "METRIC prism_perf_MBps $(grep -o '"MBps": *[0-9.]*' /tmp/ppc | grep -o '[0-9.]*$')"
  grep -h 'prism verbs stats' /tmp/pps /tmp/ppc
  tr ',' '\n' < /tmp/ppc | grep -E '"(rto_events|retransmitted_packets|tail_loss_probes|srtt_us|cwnd_bytes|iterations|sleeps)"' | tr -d '\n '; echo
  report pp${TAG:-}
}
# RUNS items: ib, vp, pp, or pp:TAG:EXTRA-OPTIONS (commas for spaces).
for r in ${RUNS:-vp pp}; do
  case $r in
    pp:*) t=${r#pp:}; TAG=_${t%%:*} PP_EXTRA="${PP_EXTRA:-} $(echo "${t#*:}" | tr , ' ')" run_pp ;;
    *) run_$r ;;
  esac
done
