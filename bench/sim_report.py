#!/usr/bin/env python3
"""Markdown tables of `berth sim -o json` reports (bench/sim_report.sh): one per file, a row per
policy, with the gain over fifo in mean JCT and whether big jobs waited no longer than
under fifo."""
import json
import sys


def span(s):
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.1f}m"
    if s < 172800:
        return f"{s / 3600:.2f}h"
    return f"{s / 86400:.1f}d"


def table(path):
    d = json.load(open(path))
    res = d["results"]
    fifo = next((r for r in res if r["policy"] == "fifo"), None)
    size = f"{d['nodes']} x {d['gpus_per_node'] or d['cpus_per_node']}"
    print(f"#### {d['trace'].split('/')[-1]}, {size} ({d['jobs']} jobs)\n")
    print("| policy | JCT mean | gain | JCT median | JCT p99 | wait mean | wait p99 | big-job wait max | "
          "≤ fifo | alloc | Jain | preempt | pred. within 2x | wall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res:
        gain = fifo["jct_mean_s"] / r["jct_mean_s"] if fifo and r["jct_mean_s"] else 0
        ok = "yes" if fifo and r["big_wait_max_s"] <= fifo["big_wait_max_s"] else "**no**"
        p = r["prediction"]
        jobs = r["finished"] if not r["unfinished"] else f"{r['finished']}/{r['jobs']}"
        print(f"| `{r['policy']}` | {span(r['jct_mean_s'])} | {gain:.2f}x | {span(r['jct_median_s'])} | "
              f"{span(r['jct_p99_s'])} | {span(r['wait_mean_s'])} | {span(r['wait_p99_s'])} | "
              f"{span(r['big_wait_max_s'])} | {ok} | {r['allocation']:.3f} | {r['jain_slowdown']:.3f} | "
              f"{r['preemptions']} | {p['within_2x'] * 100:.0f}% | {r['wall_s']:.1f}s |"
              + ("" if not r["unfinished"] else f" ({jobs} finished)"))
    for s in d.get("skipped", []):
        print(f"\n`{s['policy']}` skipped: {s['why']}")
    r0 = res[0]["prediction"]
    print(f"\nPredictions (first submit of each job, {r0['predicted']} of {r0['started']} jobs had history): "
          f"median predicted/actual {r0['median_ratio']:.2f}, within 2x {r0['within_2x'] * 100:.0f}%, "
          f"too short {r0['under'] * 100:.0f}%, mean absolute error {span(r0['mean_abs_error_s'])}.\n")


for path in sys.argv[1:]:
    table(path)
