#!/usr/bin/env python3
"""Helper of bench/slurm-side-by-side.sh (issue 20).

    slurm-side-by-side.py submit-berth N CONNS      # N pending jobs via POST /v1/jobs
    slurm-side-by-side.py time RESULTS SYSTEM LABEL RUNS CMD [ARGS...]
    slurm-side-by-side.py table RESULTS

submit-berth: BERTH_URL and BERTH_TOKEN from the environment; CONNS threads, each on one
keep-alive connection; prints the rate. time: runs CMD RUNS times (stdout read through a pipe
and its lines counted, stderr to /dev/null) and appends `SYSTEM|LABEL|median|p90|lines` to
RESULTS. table: RESULTS as a Markdown table, one line per LABEL, Slurm beside berth.
"""

import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def submit_berth(n, conns):
    u = urllib.parse.urlparse(os.environ["BERTH_URL"])
    token = os.environ["BERTH_TOKEN"]
    body = json.dumps({"spec": {"name": "bench", "command": ["true"],
                                "resources": {"cpu_milli": 1000, "mem_bytes": 1 << 28, "gpu_milli": 0}}}).encode()
    headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
    counts = [n // conns + (1 if i < n % conns else 0) for i in range(conns)]
    errors = []

    def worker(k):
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        for _ in range(k):
            c.request("POST", "/v1/jobs", body=body, headers=headers)
            r = c.getresponse()
            raw = r.read()
            if r.status >= 300:
                errors.append("%d %s" % (r.status, raw[:200]))
                return

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(k,)) for k in counts]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    if errors:
        sys.exit("submit failed: " + errors[0])
    print("berth: submitted %d jobs in %.1f s (%.0f/s, %d keep-alive connections)" % (n, dt, n / dt, conns), flush=True)


def time_cmd(results, system, label, runs, cmd):
    xs, lines = [], 0
    for _ in range(runs):
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: p.stdout.read(1 << 16), b""))
        p.wait()
        xs.append(time.perf_counter() - t)
    med, p90 = pct(xs, 50), pct(xs, 90)
    print("%-6s %-50s median %8.3f s  p90 %8.3f s  %d lines  (rc %d)" % (system, label, med, p90, lines, p.returncode),
          flush=True)
    with open(results, "a") as f:
        f.write("%s|%s|%.4f|%.4f|%d\n" % (system, label, med, p90, lines))


def table(results):
    rows, order = {}, []
    for line in open(results):
        system, label, med, p90, lines = line.rstrip("\n").split("|")
        if label not in rows:
            order.append(label)
            rows[label] = {}
        rows[label][system] = (float(med), float(p90), int(lines))

    def cell(v):
        return "%.3f / %.3f s (%d lines)" % v if v else "–"

    print("| command | Slurm 22.05: median / p90 | berth: median / p90 |")
    print("|---|---|---|")
    for label in order:
        r = rows[label]
        print("| `%s` | %s | %s |" % (label, cell(r.get("slurm")), cell(r.get("berth"))))


def main():
    cmd = sys.argv[1]
    if cmd == "submit-berth":
        submit_berth(int(sys.argv[2]), int(sys.argv[3]))
    elif cmd == "time":
        time_cmd(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6:])
    elif cmd == "table":
        table(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
