#!/usr/bin/env python3
"""How long a process takes to join a cgroup v1 cgroup (root), with GAP seconds of quiet
between joins: the cost a job's start pays on a quiet node (issue 15 item 7, docs/perf.md).

    bench/cgroup-join.py GAP N     e.g. 0.5 20, then 0 50
"""
import os, time, sys, statistics
base = "/sys/fs/cgroup/pids/berth-latency-probe"  # removed at the end
os.makedirs(base, exist_ok=True)
gap = float(sys.argv[1]); n = int(sys.argv[2])
res = []
for i in range(n):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        t = time.perf_counter_ns()
        with open(base + "/cgroup.procs", "w") as f: f.write("0")
        os.write(w, str(time.perf_counter_ns() - t).encode()); os._exit(0)
    os.waitpid(pid, 0); res.append(int(os.read(r, 64)) / 1e6); os.close(r); os.close(w)
    time.sleep(gap)
res.sort()
print(f"gap {gap}s: join p50 {res[len(res)//2]:.2f} ms, p90 {res[int(len(res)*.9)]:.2f} ms, min {res[0]:.2f}")
os.rmdir(base)
