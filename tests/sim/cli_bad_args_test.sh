#!/bin/bash
# Bad command lines of prism_sim, prism_bench, prism_perf and prism_demo:
# each must exit with a usage or error status (1 or 2, never a signal),
# print a line naming what was wrong, and run nothing (prism_bench: not
# even its --out directory created).
# Usage: cli_bad_args_test.sh PRISM_SIM [PRISM_BENCH PRISM_PERF PRISM_DEMO]
# (without them, in a configuration without benchmarks such as the
# ASan+UBSan one, their cases are left out).
set -u
sim=$1
bench=${2:-}
perf=${3:-}
demo=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# expect RC PATTERN CMD...: CMD exits RC and its stderr matches PATTERN.
expect() {
  local want_rc=$1 pattern=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -ne $want_rc ]] || ! grep -qE -- "$pattern" "$tmp/err"; then
    echo "FAIL: $* -> rc $rc (want $want_rc), stderr:"
    sed 's/^/  | /' "$tmp/err" | head -5
    fail=1
  else
    echo "ok: $* -> rc $rc: $(head -1 "$tmp/err")"
  fi
}

expect 2 "bad value '0' for --hosts \(a positive integer\)" \
  "$sim" --bench --hosts 0
expect 2 "bad value 'abc' for --planes" "$sim" --bench --planes abc
expect 2 "--group needs a value" "$sim" --bench --group
expect 2 "bad value '-5' for --duration_us" "$sim" --bench --duration_us -5
expect 2 "bad value 'inf' for --duration_us" "$sim" --bench --duration_us inf
expect 2 "bad value 'nan' for --duration_us" "$sim" --bench --duration_us nan
expect 2 "bad value '-1' for --window" "$sim" --bench --window -1
expect 2 "bad value 'x' for --seed" "$sim" --scenario f.json --out d --seed x
expect 2 "bad value '-2' for --nic-pull-watermark" \
  "$sim" --bench --nic-pull-watermark -2
expect 2 "--scenario FILE.json and --out DIR are both needed" \
  "$sim" --scenario "$tmp/none.json"
expect 2 "unknown argument --frobnicate" "$sim" --bench --frobnicate
expect 2 "bad value 'fast' for --scheduler \(exact or batched\)" \
  "$sim" --bench --scheduler fast
expect 1 "needs fabric.lazy_switch_ports off" \
  "$sim" --bench --hosts 16 --duration_us 5 --scheduler batched --lazy-ports
expect 1 "planes = 300 out of range" "$sim" --bench --hosts 16 --planes 300
expect 1 "$tmp/none.json" "$sim" --scenario "$tmp/none.json" --out "$tmp/o1"
echo '{"name": ' >"$tmp/bad.json"
expect 1 "json" "$sim" --scenario "$tmp/bad.json" --out "$tmp/o2"
for d in o1 o2; do
  if [[ -e "$tmp/$d"/summary.json ]]; then
    echo "FAIL: $d has results from a rejected command line"
    fail=1
  fi
done

if [[ -z "$bench" ]]; then
  echo "prism_bench not built here: its cases left out"
  exit $fail
fi
expect 2 "unknown suite 'nosuch'" "$bench" nosuch --out "$tmp/o3"
expect 2 "bad --seed 'abc'" "$bench" port-loss --out "$tmp/o4" --seed abc
expect 2 "suite 'port-loss' runs no transport 'nosuch' \(it runs prism, roce, multiqp\)" \
  "$bench" port-loss --quick --no-plot --out "$tmp/o5" --only nosuch
expect 2 "runs no transport 'prism' \(it runs prism-oblivious" \
  "$bench" permutation --quick --no-plot --out "$tmp/o6" --only prism
expect 2 "oracle_reroute_after_us inf" \
  "$bench" port-loss --quick --no-plot --out "$tmp/o7" \
  --oracle-reroute-after-us inf
expect 2 "unexpected argument '--bogus'" "$bench" port-loss --out "$tmp/o8" \
  --bogus

for d in o3 o4 o5 o6 o7 o8; do
  if [[ -e "$tmp/$d" ]]; then
    echo "FAIL: a rejected command line created its --out directory $d"
    fail=1
  fi
done

# prism_perf and prism_demo: a value that does not fit is refused, not
# wrapped (--qps 65537 ran with 1 QP, --mib=5x moved 5 MiB, --seed=x was
# seed 0). prism_perf without a host would serve: each case fails first.
expect 1 "--qps must be 1 .. 1024" "$perf" --qps=65537
expect 1 "--qps must be 1 .. 1024" "$perf" --qps=0
expect 1 "not a number: 'x'" "$perf" --qps=x
expect 1 "--mtu-payload must be 0 .. 2\^32-1" "$perf" --mtu-payload=4294967296
expect 1 "not a number: '-1'" "$perf" --mtu-payload=-1
# Times that do not convert to Time (int64 picoseconds) were undefined
# conversions; now each is refused with its range.
expect 1 "--rto-min must be a number in \\[0, 1e\\+09\\]: 'inf'" "$perf" --rto-min=inf
expect 1 "--rto-max must be a number in \\(0, 1e\\+09\\]: '1e300'" "$perf" --rto-max=1e300
expect 1 "--base-rtt must be a number in \\(0, 1e\\+09\\]: 'nan'" "$perf" --base-rtt=nan
expect 1 "--probe must be a number in \\(0, 1e\\+09\\]: '-5'" "$perf" --probe=-5
expect 1 "--ack-delay must be a number in \\[0, 1e\\+09\\]: 'inf'" "$perf" --ack-delay=inf
expect 1 "--duration \\(seconds\\) must be a number in \\(0, 1000\\]: 'inf'" "$perf" --duration=inf
expect 1 "--mtu must be 0 .. 65535" "$perf" --mtu=70000
expect 1 "--rate must be 1 .. 1000000 Gbit/s" "$perf" --rate=99999999999
expect 2 "--mib must be in \[1, 4096\]" "$demo" --mib=5x
expect 2 "--mib must be in \[1, 4096\]" "$demo" --mib=0
expect 2 "--seed must be a whole number" "$demo" --seed=x
expect 2 "usage" "$demo" --bogus
exit $fail
