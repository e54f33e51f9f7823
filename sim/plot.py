#!/usr/bin/env python3
"""Plots for a prism_sim output directory (python3-matplotlib).

usage: plot.py DIR   -> DIR/goodput.png, DIR/queues.png, DIR/<transport>_flows.png
"""
import csv
import os
import sys
from collections import defaultdict


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    d = sys.argv[1]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots skipped: python3-matplotlib is not installed")
        return 0
    path = os.path.join(d, "goodput.csv")
    if not os.path.exists(path):
        print("no goodput.csv in", d)
        return 1
    series = defaultdict(lambda: ([], [], [], []))
    with open(path) as f:
        for row in csv.DictReader(f):
            s = series[row["transport"]]
            s[0].append(float(row["time_us"]))
            s[1].append(float(row["goodput_gbps"]))
            s[2].append(float(row["max_queue_bytes"]) / 1024)
            s[3].append(float(row["total_queue_bytes"]) / 1024)
    faults = []
    summary = os.path.join(d, "summary.json")
    if os.path.exists(summary):
        import json
        with open(summary) as f:
            js = json.load(f)
        for t in js.get("transports", {}).values():
            faults = [e["t_us"] for e in t.get("fault_log", [])]
            break
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, (t, g, _, _) in sorted(series.items()):
        ax.plot(t, g, label=name)
    for x in faults[:50]:
        ax.axvline(x, color="red", alpha=0.25, linewidth=0.8)
    ax.set_xlabel("time (us)")
    ax.set_ylabel("aggregate goodput (Gb/s)")
    ax.set_title("goodput" + (" (red: faults)" if faults else ""))
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(d, "goodput.png"), dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, (t, _, mq, _) in sorted(series.items()):
        ax.plot(t, mq, label=name + " deepest queue")
    ax.set_xlabel("time (us)")
    ax.set_ylabel("KiB")
    ax.set_title("switch queue depth")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(d, "queues.png"), dpi=110)
    plt.close(fig)
    for name in series:
        fpath = os.path.join(d, name + "_flows.csv")
        if not os.path.exists(fpath):
            continue
        flows = defaultdict(lambda: ([], []))
        with open(fpath) as f:
            for row in csv.DictReader(f):
                fl = flows[int(row["flow"])]
                fl[0].append(float(row["time_us"]))
                fl[1].append(float(row["goodput_gbps"]))
        if not flows or len(flows) > 64:
            continue
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for k, (t, g) in sorted(flows.items()):
            ax.plot(t, g, linewidth=0.8, label="flow %d" % k if len(flows) <= 10 else None)
        ax.set_xlabel("time (us)")
        ax.set_ylabel("goodput (Gb/s)")
        ax.set_title(name + ": per-flow goodput")
        if len(flows) <= 10:
            ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(d, name + "_flows.png"), dpi=110)
        plt.close(fig)
    print("plots written to", d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
