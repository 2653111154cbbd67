#!/usr/bin/env python3
"""Helpers of bench/serve.sh that need timing finer than a shell loop: they poll the
manager's API (GET /v1/endpoints/NAME, the same object as `berth serve show NAME -o json`)
every 50 ms with the admin token in $BERTH_URL / $BERTH_TOKEN, and drive `wrk` for the load.

  serve_load.py wrk URL CONNS SECS [HEADER]     one wrk run: prints "RPS P50_MS P99_MS ERRORS"
  serve_load.py kill NAME PORT_DIR APP_URL SECRET [CONNS=8]
      SIGKILLs one replica's server (its pid from PORT_DIR) under steady GET load (wrk, CONNS
      connections) and prints "SECONDS_TO_REPLACEMENT_READY SECONDS_TO_OUT_OF_ROTATION
      FAILED_REQUESTS TOTAL_REQUESTS"
  serve_load.py step NAME APP_URL SECRET CONNS MAX
      applies a load step of CONNS connections sending /slow (200 ms each) and prints the
      seconds until `desired` first rises, until it reaches MAX, and until 2, 3, ... MAX
      replicas are ready, as "KEY=SECONDS" words
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

POLL = 0.05


def endpoint(name):
    req = urllib.request.Request(
        f"{os.environ['BERTH_URL']}/v1/endpoints/{name}",
        headers={"Authorization": f"Bearer {os.environ['BERTH_TOKEN']}"},
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)


def ready_jobs(ep):
    return {r["job"] for r in ep["replicas"] if r["state"] == "ready"}


def ms(v):
    """wrk's latency ("812.00us", "3.46ms", "1.02s") in milliseconds."""
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", v)
    n, unit = float(m.group(1)), m.group(2)
    return n * {"us": 0.001, "ms": 1, "s": 1000, "m": 60000}[unit]


def parse_wrk(out):
    """(requests/s, p50 ms, p99 ms, failed requests, total requests) from wrk --latency."""
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))
    p99 = ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    errors = 0
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if m:
        errors += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    return rps, p50, p99, errors, total


def wrk_cmd(url, conns, secs, header=None):
    cmd = ["wrk", f"-t{min(2, int(conns))}", f"-c{conns}", f"-d{secs}s", "--latency", "--timeout", "10s"]
    if header:
        cmd += ["-H", header]
    return cmd + [url]


def cmd_wrk(url, conns, secs, header=None):
    out = subprocess.run(wrk_cmd(url, conns, secs, header), capture_output=True, text=True, check=True).stdout
    rps, p50, p99, errors, _ = parse_wrk(out)
    print(f"{rps:.0f} {p50:.2f} {p99:.2f} {errors}")


def cmd_kill(name, port_dir, app_url, secret, conns="8"):
    before = endpoint(name)
    old = ready_jobs(before)
    want = before["desired"]
    # the replica servers alive now (each wrote "PID PORT" to PORT_DIR when listening)
    pids = []
    for f in sorted(os.listdir(port_dir)):
        pid = int(f)
        if os.path.exists(f"/proc/{pid}"):
            pids.append(pid)
    load = subprocess.Popen(wrk_cmd(app_url, int(conns), 120, f"Authorization: Bearer {secret}"),
                            stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)  # steady load first
    t0 = time.monotonic()
    os.kill(pids[0], signal.SIGKILL)
    out_at = None
    while True:
        time.sleep(POLL)
        now = time.monotonic() - t0
        ep = endpoint(name)
        ready = ready_jobs(ep)
        if out_at is None and len(ready & old) < len(old):
            out_at = now
        if len(ready) >= want and ready - old:
            replaced = now
            break
        if now > 120:
            replaced = float("nan")
            break
    time.sleep(1.0)  # and a second of load on the new set
    load.send_signal(signal.SIGINT)  # wrk prints its summary on SIGINT
    out, _ = load.communicate()
    _, _, _, errors, total = parse_wrk(out)
    print(f"{replaced:.2f} {out_at if out_at is not None else float('nan'):.2f} {errors} {total}")


def cmd_step(name, app_url, secret, conns, top):
    conns, top = int(conns), int(top)
    start = endpoint(name)["desired"]
    marks = {}
    t0 = time.monotonic()
    load = subprocess.Popen(wrk_cmd(app_url + "slow", conns, 120, f"Authorization: Bearer {secret}"),
                            stdout=subprocess.PIPE, text=True)
    while time.monotonic() - t0 < 90:
        time.sleep(POLL)
        now = time.monotonic() - t0
        ep = endpoint(name)
        n_ready = len(ready_jobs(ep))
        if ep["desired"] > start:
            marks.setdefault("desired_rises", now)
        if ep["desired"] >= top:
            marks.setdefault(f"desired_{top}", now)
        for k in range(2, n_ready + 1):
            marks.setdefault(f"ready_{k}", now)
        if n_ready >= top:
            break
    load.send_signal(signal.SIGINT)
    out, _ = load.communicate()
    rps, p50, p99, errors, total = parse_wrk(out)
    marks_s = " ".join(f"{k}={v:.2f}" for k, v in sorted(marks.items(), key=lambda kv: kv[1]))
    print(f"{marks_s} | load: {total} requests, {errors} failed, p50 {p50:.0f} ms, p99 {p99:.0f} ms")


if __name__ == "__main__":
    {"wrk": cmd_wrk, "kill": cmd_kill, "step": cmd_step}[sys.argv[1]](*sys.argv[2:])
