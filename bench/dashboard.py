#!/usr/bin/env python3
"""The dashboard's figures (issue 16): server time of the jobs page with 100,000 jobs in the
store, page weight, and how soon a stored change reaches an open page.

    bench/dashboard.py [BERTH=target/release/berth] [PENDING=20000] [STORED=100000]

Starts a fresh `berth up` (release build, temp data dir, no docker, no cache) and drains its
node so that jobs stay pending, then:
  1. submits PENDING jobs over one keep-alive connection and times the page's own requests
     (GET /v1/jobs?limit=50 with the filters the page sends), served from memory;
  2. stops berth, adds STORED finished jobs to its store (copies of a finished job's row, in
     one SQLite transaction: submitting and running that many would take the bench longer
     than the figure is worth), starts it again and times the same requests with `all=true`,
     served from the store;
  3. sums the gzip-compressed size of the page (HTML + JS + CSS);
  4. logs in as the dashboard does (berth ui, the cookie), opens /ui/events and times 200
     submits and 200 cancels from the request to the change's event on the stream.
Prints p50/p90/p99 per case. Times are figures, never assertions.
"""

import gzip
import http.client
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def ms(xs):
    return "p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  (n=%d)" % (
        pct(xs, 50) * 1e3, pct(xs, 90) * 1e3, pct(xs, 99) * 1e3, len(xs))


class Api:
    def __init__(self, host, port, token=None, cookie=None, csrf=None):
        self.c = http.client.HTTPConnection(host, port, timeout=60)
        self.token, self.cookie, self.csrf = token, cookie, csrf

    def call(self, method, path, body=None):
        h = {"Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if self.cookie:
            h["Cookie"] = self.cookie
            if method != "GET":
                h["x-berth-csrf"] = self.csrf
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        self.c.request(method, path, body=data, headers=h)
        r = self.c.getresponse()
        raw = r.read()
        if r.status >= 300:
            raise RuntimeError("%s %s: %d %s" % (method, path, r.status, raw[:200]))
        return json.loads(raw) if raw and r.getheader("content-type", "").startswith("application/json") else raw


def start(berth, tmp, env):
    """`berth up` on tmp's data dir; returns (process, host, port, token)."""
    log = open(os.path.join(tmp, "up.log"), "w+")
    up = subprocess.Popen([berth, "up", "--data-dir", os.path.join(tmp, "data"), "--listen", "127.0.0.1:0",
                           "--no-docker", "--no-cache"], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp)
    for _ in range(600):
        log.seek(0)
        m = re.search(r"berth is up: (http://[\d.]+:\d+)", log.read())
        if m:
            u = urllib.parse.urlparse(m.group(1))
            creds = open(os.path.join(tmp, ".config/berth/credentials")).read()
            return up, u.hostname, u.port, re.search(r'token = "([0-9a-f]+)"', creds).group(1)
        time.sleep(0.05)
    raise SystemExit("berth did not start: see " + log.name)


def stop(up):
    up.send_signal(signal.SIGINT)
    try:
        up.wait(60)
    except subprocess.TimeoutExpired:
        up.kill()
        up.wait()


def spec(name):
    return {"spec": {"name": name, "command": ["true"], "resources": {"cpu_milli": 1000, "mem_bytes": 1 << 30,
                                                                     "gpu_milli": 0}}}


def page_times(api, label, cases, n=200):
    for name, path in cases:
        xs = []
        for _ in range(n):
            t = time.perf_counter()
            api.call("GET", path)
            xs.append(time.perf_counter() - t)
        print("%-9s %-22s %s" % (label, name, ms(xs)), flush=True)


def main():
    berth = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/berth")
    pending = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    stored = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
    tmp = tempfile.mkdtemp(prefix="berth-dash.", dir="/var/tmp")
    env = dict(os.environ, HOME=tmp, XDG_CONFIG_HOME="", RUST_LOG="warn")
    for k in ("BERTH_URL", "BERTH_TOKEN", "BERTH_SOCKET", "BERTH_CREDENTIALS", "BERTH_DATA_DIR"):
        env.pop(k, None)
    up = None
    try:
        up, host, port, token = start(berth, tmp, env)
        api = Api(host, port, token=token)
        for _ in range(200):
            nodes = api.call("GET", "/v1/nodes")
            if nodes and nodes[0]["state"] == "ready":
                break
            time.sleep(0.05)
        # One finished job: the row the store phase copies.
        done = api.call("POST", "/v1/jobs", spec("finished"))["id"]
        while api.call("GET", "/v1/jobs/%d" % done)["job"]["state"] != "SUCCEEDED":
            time.sleep(0.05)
        node = nodes[0]["name"]
        api.call("POST", "/v1/nodes/%s/drain" % node, {"reason": "dashboard bench: jobs stay pending"})

        def rss():
            status = open("/proc/%d/status" % up.pid).read()
            return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024

        rss0 = rss()
        t0 = time.perf_counter()
        ids = [api.call("POST", "/v1/jobs", spec("train-%d" % i))["id"] for i in range(pending)]
        print("submitted %d jobs in %.1f s (%.0f/s)" % (pending, time.perf_counter() - t0,
                                                          pending / (time.perf_counter() - t0)), flush=True)
        time.sleep(2)
        print("manager RSS: %.1f MiB before, %.1f MiB after: %.0f B per pending job"
              % (rss0 / 2**20, rss() / 2**20, (rss() - rss0) / pending), flush=True)
        mid = ids[len(ids) // 2]
        cases = [
            ("first page", "/v1/jobs?limit=50"),
            ("page in the middle", "/v1/jobs?limit=50&before=%d" % mid),
            ("filter user", "/v1/jobs?limit=50&user=admin"),
            ("filter name (rare)", "/v1/jobs?limit=50&name=train-4242"),
        ]
        page_times(api, "memory", cases)
        # Each change wakes a pass: with a deep queue, what a pass costs is what a change waits.
        t0 = time.perf_counter()
        for i in ids[-500:]:
            api.call("POST", "/v1/jobs/%d/cancel" % i)
        print("cancelled 500 of %d pending jobs: %.0f cancels/s" % (pending, 500 / (time.perf_counter() - t0)), flush=True)

        stop(up)
        up = None
        db = sqlite3.connect(os.path.join(tmp, "data", "berth.db"))
        cols = [r[1] for r in db.execute("PRAGMA table_info(jobs)") if r[1] != "id"]
        top = db.execute("SELECT max(id) FROM jobs").fetchone()[0]
        t0 = time.perf_counter()
        with db:
            db.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                "INSERT INTO jobs (id, %s) SELECT ? + i, %s FROM n, jobs WHERE jobs.id = ?"
                % (", ".join(cols), ", ".join("jobs." + c for c in cols)), (stored, top, done))
        db.close()
        print("added %d finished jobs to the store in %.1f s" % (stored, time.perf_counter() - t0), flush=True)
        up, host, port, token = start(berth, tmp, env)
        api = Api(host, port, token=token)
        top_id = top + stored
        store_cases = [
            ("first page", "/v1/jobs?limit=50&all=true"),
            ("page in the middle", "/v1/jobs?limit=50&all=true&before=%d" % (top + stored // 2)),
            ("filter user", "/v1/jobs?limit=50&all=true&user=admin"),
            ("filter state", "/v1/jobs?limit=50&state=SUCCEEDED"),
            ("filter name (rare)", "/v1/jobs?limit=50&all=true&name=train-4242"),
        ]
        page_times(api, "store", store_cases)

        # Page weight: what a first visit downloads, compressed.
        total_raw = total_gz = 0
        for path in ("/", "/assets/app.js", "/assets/app.css"):
            body = api.call("GET", path)
            total_raw += len(body)
            total_gz += len(gzip.compress(body, 9))
        print("page weight: %d bytes, %d bytes gzip-compressed" % (total_raw, total_gz), flush=True)

        # A change to an open page: log in as a browser does and listen.
        link = subprocess.run([berth, "ui"], env=env, cwd=tmp, capture_output=True, text=True, check=True).stdout.strip()
        c = http.client.HTTPConnection(host, port, timeout=10)
        u = urllib.parse.urlparse(link)
        c.request("GET", u.path + "?" + u.query)
        r = c.getresponse()
        r.read()
        cookie = r.getheader("set-cookie").split(";")[0]
        web = Api(host, port, cookie=cookie)
        web.csrf = web.call("GET", "/ui/session")["csrf"]
        seen = {}
        ready = threading.Event()

        def listen():
            s = http.client.HTTPConnection(host, port, timeout=300)
            s.request("GET", "/ui/events", headers={"Cookie": cookie, "Accept": "text/event-stream"})
            resp = s.getresponse()
            ready.set()
            event = None
            while True:
                line = resp.fp.readline()
                if not line:
                    return
                line = line.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "job":
                    v = json.loads(line[6:])
                    seen.setdefault((v["id"], v["state"]), time.perf_counter())

        threading.Thread(target=listen, daemon=True).start()
        ready.wait(10)
        time.sleep(0.2)

        def change(method, path, body, state_of):
            t = time.perf_counter()
            out = web.call(method, path, body)
            key = state_of(out)
            while key not in seen:
                time.sleep(0.0002)
            return seen[key] - t

        live = [change("POST", "/v1/jobs", spec("live-%d" % i), lambda v: (v["id"], "PENDING")) for i in range(200)]
        print("submit -> its event on an open page: " + ms(live), flush=True)
        first = top_id + 1
        gone = [change("POST", "/v1/jobs/%d/cancel" % j, None, lambda v: (v["id"], "CANCELLED"))
                for j in range(first, first + 200)]
        print("cancel -> its event on an open page: " + ms(gone), flush=True)
    finally:
        if up:
            stop(up)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
