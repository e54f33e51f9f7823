#!/bin/bash
# seed_sweep.sh SCENARIO FIRST LAST PRISM_SIM [PRISM_SIM ...]
# Runs one simulator scenario over seeds FIRST..LAST with each prism_sim
# binary given (e.g. a build before and after an engine change; the seeds
# alternate between binaries, so a machine whose speed drifts treats them
# alike; the results do not depend on speed anyway) and prints, per binary
# and Prism transport, the means over the seeds of: end time (us),
# goodput_fraction, flow completion p50 and max (us), spurious_losses,
# paths_unretired and path_retirements, and how many seeds left a flow
# unfinished. With SWEEP_ROWS=1 each seed's row is printed too.
# Environment passed through, so an experiment switched by a variable runs
# as VAR=value seed_sweep.sh ...
# Used for docs/congestion.md "Spurious-loss undo" (tried and not kept).
set -u
SC=${1:?scenario json} FIRST=${2:?first seed} LAST=${3:?last seed}
shift 3
[ $# -ge 1 ] || { echo "usage: $0 SCENARIO FIRST LAST PRISM_SIM..." >&2; exit 2; }
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
for s in $(seq "$FIRST" "$LAST"); do
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    if ! "$bin" --scenario "$SC" --seed "$s" --out "$TMP/o$i" --quiet \
        --no-plot > "$TMP/log" 2>&1; then
      echo "seed $s: $bin failed:" >&2
      tail -5 "$TMP/log" >&2
      exit 1
    fi
    python3 - "$i" "$s" "$TMP/o$i/summary.json" >> "$TMP/rows" <<'PY'
import json, sys
i, seed, path = sys.argv[1:4]
for name, t in json.load(open(path))["transports"].items():
    if not name.startswith("prism"):
        continue
    f = t["fct_us"]
    print(i, seed, name, t["end_time_us"], t["goodput_fraction"], f["p50"],
          f["max"], t["spurious_losses"], t["paths_unretired"],
          t["path_retirements"], int(bool(t["completed"])))
PY
  done
done
python3 - "$TMP/rows" "${SWEEP_ROWS:-0}" "$@" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
show, bins = sys.argv[2] == "1", sys.argv[3:]
if show:
    for r in rows:
        print("  ", bins[int(r[0]) - 1], *r[1:])
print("%-28s %-14s %5s %9s %8s %8s %8s %6s %6s %6s %5s" %
      ("binary", "transport", "seeds", "end_us", "goodput", "p50_us",
       "max_us", "spur", "unret", "retire", "unfin"))
for i, b in enumerate(bins, 1):
    for t in sorted({r[2] for r in rows if r[0] == str(i)}):
        rr = [r for r in rows if r[0] == str(i) and r[2] == t]
        m = lambda k: sum(float(r[k]) for r in rr) / len(rr)
        print("%-28s %-14s %5d %9.2f %8.4f %8.2f %8.2f %6.1f %6.1f %6.1f %5d" %
              (b[-28:], t, len(rr), m(3), m(4), m(5), m(6), m(7), m(8), m(9),
               sum(r[10] == "0" for r in rr)))
PY
