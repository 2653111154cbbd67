#!/usr/bin/env python3
"""Helper of bench/slurm-tools.sh (issue 48): its results as Markdown tables.

    slurm_tools_report.py OUT

OUT holds `tools` (side|tool|ok|seconds), `<side>/calls.log` (record.sh's records) and `probes`
(side, label, status, output; fields split by \\x1f). Prints, Slurm beside berth: each tool's
result and wall time; each call shape the tools made (the command, its options and keywords,
without ids, paths and names) with how many calls and which exit statuses; each probe's status
and first lines.
"""

import os
import sys
from collections import defaultdict

SIDES = ("slurm", "berth")


def shape(argv, part):
    """Mirrors `Call::shape` in crates/cli/tests/support/slurm_calls.rs; PART is the side's
    partition, shown as `PART`."""
    user = os.environ.get("USER", "root")
    out = [argv[0]]
    for a in argv[1:]:
        if a.startswith("-") and len(a) > 1:
            if out[-1] != a.split("=")[0]:
                out.append(a.split("=")[0])
        elif argv[0] == "srun":
            break
        elif "=" in a:
            key = a.split("=")[0]
            if key and key.isascii() and key.islower() and key.isalpha():
                out.append(key + "=")
        elif a == part:
            out.append("PART")
        elif a and a.isascii() and a.isalpha() and a.islower() and a != user:
            out.append(a)
    return " ".join(out)


def calls(path):
    try:
        log = open(path, encoding="utf-8", errors="replace").read()
    except FileNotFoundError:
        return []
    out = []
    for rec in log.split("\x1e"):
        if not rec.strip():
            continue
        parts = rec.split("\x1d", 2)
        argv = parts[0].split("\x1f")
        status = parts[1] if len(parts) > 1 else "?"
        out.append((argv, status))
    return out


def cell(text):
    return text.replace("|", "\\|").strip() or " "


def main(out):
    print("| tool | Slurm 22.05 | berth |\n|---|---|---|")
    tools = defaultdict(dict)
    for line in open(os.path.join(out, "tools")) if os.path.exists(os.path.join(out, "tools")) else []:
        side, tool, ok, secs = line.rstrip("\n").split("|")
        tools[tool][side] = f"{ok}, {secs} s"
    for tool, by in tools.items():
        print(f"| {tool} | {by.get('slurm', '-')} | {by.get('berth', '-')} |")

    print("\n| call the tools made | Slurm 22.05: calls (exit) | berth: calls (exit) |\n|---|---|---|")
    shapes = defaultdict(lambda: {s: defaultdict(int) for s in SIDES})
    for side, part in (("slurm", "debug"), ("berth", "default")):
        for argv, status in calls(os.path.join(out, side, "calls.log")):
            shapes[shape(argv, part)][side][status] += 1

    def fmt(by):
        if not by:
            return "-"
        n = sum(by.values())
        return f"{n} ({', '.join(f'{k}×{v}' if v > 1 else k for k, v in sorted(by.items()))})"

    for s in sorted(shapes):
        print(f"| `{cell(s)}` | {fmt(shapes[s]['slurm'])} | {fmt(shapes[s]['berth'])} |")

    print("\n| probe | Slurm 22.05 | berth |\n|---|---|---|")
    probes = defaultdict(dict)
    order = []
    path = os.path.join(out, "probes")
    for line in open(path, encoding="utf-8", errors="replace") if os.path.exists(path) else []:
        side, label, rc, text = (line.rstrip("\n").split("\x1f") + ["", "", "", ""])[:4]
        if label not in order:
            order.append(label)
        probes[label][side] = f"exit {rc}: `{cell(text)}`" if text.strip() else f"exit {rc}"
    for label in order:
        by = probes[label]
        print(f"| {cell(label)} | {by.get('slurm', '-')} | {by.get('berth', '-')} |")


if __name__ == "__main__":
    main(sys.argv[1])
