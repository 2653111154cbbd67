#!/usr/bin/env python3
"""The dashboard's figures (issue 16): server time of the jobs page with 100,000 jobs in the
store, page weight, and how soon a stored change reaches an open page.

    bench/dashboard.py [BERTH=target/release/berth] [JOBS=100000]

Starts a fresh `berth up` (release build, temp data dir, no docker, no cache), drains its node
so that jobs stay pending, submits JOBS jobs over one keep-alive connection, then:
  1. times the page's own requests (GET /v1/jobs?limit=50 with the filters the page sends)
     while the jobs are pending (served from memory), then after cancelling them all (from the
     store);
  2. sums the gzip-compressed size of the page (HTML + JS + CSS);
  3. logs in as the dashboard does (berth ui, the cookie), opens /ui/events and times each of
     200 submits from the request to the event on the stream.
Prints p50/p90/p99 per case. Times are figures, never assertions.
"""

import gzip
import http.client
import json
import os
import re
import shutil
import signal
import statistics
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


def main():
    berth = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/berth")
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    tmp = tempfile.mkdtemp(prefix="berth-dash.", dir="/var/tmp")
    env = dict(os.environ, HOME=tmp, XDG_CONFIG_HOME="", RUST_LOG="warn")
    for k in ("BERTH_URL", "BERTH_TOKEN", "BERTH_SOCKET", "BERTH_CREDENTIALS", "BERTH_DATA_DIR"):
        env.pop(k, None)
    log = open(os.path.join(tmp, "up.log"), "w+")
    up = subprocess.Popen([berth, "up", "--data-dir", os.path.join(tmp, "data"), "--listen", "127.0.0.1:0",
                           "--no-docker", "--no-cache"], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp)
    try:
        url = None
        for _ in range(600):
            log.seek(0)
            m = re.search(r"berth is up: (http://[\d.]+:\d+)", log.read())
            if m:
                url = m.group(1)
                break
            time.sleep(0.05)
        assert url, "berth did not start"
        host, port = urllib.parse.urlparse(url).hostname, urllib.parse.urlparse(url).port
        creds = open(os.path.join(tmp, ".config/berth/credentials")).read()
        token = re.search(r'token = "([0-9a-f]+)"', creds).group(1)
        api = Api(host, port, token=token)
        for _ in range(200):
            nodes = api.call("GET", "/v1/nodes")
            if nodes and nodes[0]["state"] == "ready":
                break
            time.sleep(0.05)
        node = nodes[0]["name"]
        api.call("POST", "/v1/nodes/%s/drain" % node, {"reason": "dashboard bench: jobs stay pending"})

        t0 = time.perf_counter()
        ids = []
        for i in range(jobs):
            spec = {"name": "train-%d" % i, "command": ["true"], "resources": {"cpu_milli": 1000,
                    "mem_bytes": 1 << 30, "gpu_milli": 0}}
            ids.append(api.call("POST", "/v1/jobs", {"spec": spec})["id"])
        print("submitted %d jobs in %.1f s" % (jobs, time.perf_counter() - t0))

        def page_times(label, paths, n=200):
            for name, path in paths:
                xs = []
                for _ in range(n):
                    t = time.perf_counter()
                    api.call("GET", path)
                    xs.append(time.perf_counter() - t)
                print("%-9s %-34s %s" % (label, name, ms(xs)))

        mid = ids[len(ids) // 2]
        cases = [
            ("first page", "/v1/jobs?limit=50"),
            ("page in the middle", "/v1/jobs?limit=50&before=%d" % mid),
            ("filter user", "/v1/jobs?limit=50&user=admin"),
            ("filter name (rare)", "/v1/jobs?limit=50&name=train-4242"),
        ]
        page_times("pending", cases)

        t0 = time.perf_counter()
        for i in ids:
            api.call("POST", "/v1/jobs/%d/cancel" % i)
        print("cancelled %d jobs in %.1f s" % (jobs, time.perf_counter() - t0))
        page_times("finished", [(n, p + "&all=true") for n, p in cases])

        # Page weight: what a first visit downloads, compressed.
        total_raw = total_gz = 0
        for path in ("/", "/assets/app.js", "/assets/app.css"):
            body = api.call("GET", path)
            total_raw += len(body)
            total_gz += len(gzip.compress(body, 9))
        print("page weight: %d bytes, %d bytes gzip-compressed" % (total_raw, total_gz))

        # A change to an open page: log in as a browser does and listen.
        link = subprocess.run([berth, "ui"], env=env, cwd=tmp, capture_output=True, text=True, check=True).stdout.strip()
        c = http.client.HTTPConnection(host, port, timeout=10)
        c.request("GET", urllib.parse.urlparse(link).path + "?" + urllib.parse.urlparse(link).query)
        r = c.getresponse()
        r.read()
        cookie = r.getheader("set-cookie").split(";")[0]
        web = Api(host, port, cookie=cookie)
        csrf = web.call("GET", "/ui/session")["csrf"]
        web.csrf = csrf
        seen = {}
        ready = threading.Event()

        def listen():
            s = http.client.HTTPConnection(host, port, timeout=120)
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
        lat = []
        for i in range(200):
            t = time.perf_counter()
            spec = {"name": "live-%d" % i, "command": ["true"], "resources": {"cpu_milli": 1000,
                    "mem_bytes": 1 << 30, "gpu_milli": 0}}
            jid = web.call("POST", "/v1/jobs", {"spec": spec})["id"]
            while (jid, "PENDING") not in seen:
                time.sleep(0.0002)
            lat.append(seen[(jid, "PENDING")] - t)
            time.sleep(0.02)
        print("submit (as the page, cookie + csrf) -> its event on /ui/events: " + ms(lat))
        clat = []
        for jid in range(ids[-1] + 1, ids[-1] + 201):
            t = time.perf_counter()
            web.call("POST", "/v1/jobs/%d/cancel" % jid)
            while (jid, "CANCELLED") not in seen:
                time.sleep(0.0002)
            clat.append(seen[(jid, "CANCELLED")] - t)
            time.sleep(0.02)
        print("cancel -> its event on /ui/events: " + ms(clat))
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(30)
        except subprocess.TimeoutExpired:
            up.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
