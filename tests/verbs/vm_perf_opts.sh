#!/bin/bash
# vm_perf_opts.sh - sourced by the rxe-VM benchmark scripts (compare_bw.sh,
# cpu_per_byte.sh, prism_perf_options.sh): the engine options prism_perf
# --datapath verbs runs with under QEMU TCG, and the RoCE v2 GID lookup they
# all need. Defines, changes nothing else:
#   VM_TIMER_OPTS  base RTT 2 ms, RTO in [100 ms, 2 s], probes every 20 ms:
#                  under TCG the RTT with 128 x 64 KiB in flight is 50-200 ms;
#                  an RTO ceiling at or below it fired spurious RTOs
#                  (docs/verbs.md "Through the Endpoint API"). Delayed SACK
#                  after 4 ms, not base-rtt / 4 = 500 us: under TCG the
#                  64 KiB chunks arrive about 1 ms apart, so 500 us sent
#                  one SACK per chunk in the fast runs (since 2026-12-03
#                  13:16; docs/verbs.md "64 KiB chunks and the SACK merge").
#   VM_PP_OPTS     congestion "fixed" at 10 Gb/s (window 1.5 x 10 Gb/s x 2 ms
#                  = 3.75 MB, 57 messages of 64 KiB) + VM_TIMER_OPTS: what
#                  compare_bw.sh and cpu_per_byte.sh run.
#   VM_PP_OPTS_FAIR  the same timers with the bytes in flight of ib_write_bw's
#                  defaults (tx depth 128 x 64 KiB = 8 MiB): congestion
#                  "fixed" at 23 Gb/s (window 1.5 x 23 Gb/s x 2 ms = 8.6 MB,
#                  so prism_perf's -t 128, not the window, is the limit); RTO
#                  in [1 s, 4 s] (an 8 MiB first burst took 465 ms to drain
#                  under TCG: a 500 ms floor still fired an RTO on it); a
#                  receive buffer of 128 message slots (prism_perf's default
#                  is at most 64: with 128 in flight two messages wrote one
#                  slot at once); the posting thread sleeps up to 5 ms for a
#                  completion (a completion wakes it at once; 200 us woke it
#                  thousands of times a second while the window was full).
#                  compare_bw.sh.
#   vm_roce_gid DEV  prints the index of DEV's RoCE v2 IPv4-mapped GID on
#                  port 1 (what verbs_perf and prism_perf pick), -1 if none.
VM_TIMER_OPTS="--base-rtt 2000 --rto-min 100000 --rto-max 2000000 --probe-interval 20000 --ack-delay 4000"
VM_PP_OPTS="--cc fixed --rate 10 $VM_TIMER_OPTS"
VM_PP_OPTS_FAIR="--cc fixed --rate 23 $VM_TIMER_OPTS --rto-min 1000000 --rto-max 4000000 --remote-slots 128 --wait-us 5000"
vm_roce_gid() {
  local g i t
  for g in /sys/class/infiniband/$1/ports/1/gids/*; do
    i=${g##*/}
    t=$(cat /sys/class/infiniband/$1/ports/1/gid_attrs/types/$i 2>/dev/null)
    case "$(cat $g)" in 0000:0000:0000:0000:0000:ffff:*) [ "$t" = "RoCE v2" ] && { echo $i; return; };; esac
  done
  echo -1
}
