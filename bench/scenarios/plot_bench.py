#!/usr/bin/env python3
"""Plots prism_bench results: one PNG per scenario, goodput over time per
transport with the fault intervals shaded.

usage: plot_bench.py DIR/SUITE.json

Reads the scenario list of SUITE.json and each scenario's time series
(DIR/<timeseries_csv>: transport,time_us,goodput_gbps); writes DIR/<plot>.
Exits 0 with a message when matplotlib is not installed.
"""
import csv
import json
import os
import sys


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    path = sys.argv[1]
    base = os.path.dirname(os.path.abspath(path))
    with open(path) as f:
        res = json.load(f)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots: skipped (python3-matplotlib is not installed); "
              "time series CSVs are next to %s" % path)
        return 0
    made = []
    for sc in res.get("scenarios", []):
        csv_rel = sc.get("timeseries_csv")
        png_rel = sc.get("plot")
        if not csv_rel or not png_rel:
            continue
        series = {}
        with open(os.path.join(base, csv_rel)) as f:
            for row in csv.DictReader(f):
                t, g = float(row["time_us"]), float(row["goodput_gbps"])
                series.setdefault(row["transport"], ([], []))
                series[row["transport"]][0].append(t)
                series[row["transport"]][1].append(g)
        fig, ax = plt.subplots(figsize=(9, 4.5))
        spans = sc.get("fault_spans_us", [])
        for i, (a, b) in enumerate(spans):
            ax.axvspan(a, b, color="red", alpha=0.12 if len(spans) < 20 else 0.04,
                       label="fault" if i == 0 else None)
            if len(spans) < 20:
                ax.axvline(a, color="red", lw=0.8, ls="--")
        for name, (ts, gs) in series.items():
            ax.plot(ts, gs, lw=1.2, label=name)
        ax.set_xlabel("simulated time (us)")
        ax.set_ylabel("goodput (Gbit/s)")
        ax.set_title("%s / %s" % (res.get("suite", "?"), sc.get("name", "?")))
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        out = os.path.join(base, png_rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        fig.savefig(out, dpi=110)
        plt.close(fig)
        made.append(out)
    print("plots: %d written under %s/%s/" % (len(made), base, res.get("suite", "")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
