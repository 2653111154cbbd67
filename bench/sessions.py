"""Helpers of bench/sessions.sh (issue 17): a server to run inside a job and the clients that
measure exec, port-forward and the app proxy against their direct counterparts.

  sessions.py serve TCP_PORT HTTP_PORT   # in the job: a byte source/echo and an HTTP app
  sessions.py tcp PORT [MiB]             # throughput (download) and 1-byte round trips
  sessions.py http URL [N] [HEADER]      # GET over one keep-alive connection, N times
  sessions.py runs N CMD...              # wall time of N runs of a command
"""
import http.client
import http.server
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.parse


def pct(v, unit, scale):
    v = sorted(v)
    p = lambda q: v[min(len(v) - 1, round((len(v) - 1) * q))] * scale
    return f"n={len(v)} p50 {p(.5):.2f} {unit}, p99 {p(.99):.2f} {unit}"


class Bytes(socketserver.BaseRequestHandler):
    """`D` + 8-byte length: that many bytes back; `E`: echo until closed."""

    def handle(self):
        s = self.request
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mode = s.recv(1)
        if mode == b"D":
            n = int.from_bytes(recv_exact(s, 8), "big")
            chunk = b"x" * (1 << 20)
            while n > 0:
                k = min(n, len(chunk))
                s.sendall(chunk[:k])
                n -= k
        elif mode == b"E":
            while True:
                b = s.recv(65536)
                if not b:
                    return
                s.sendall(b)


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        b = s.recv(n - len(out))
        if not b:
            raise EOFError
        out += b
    return out


class App(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # One write per answer and no Nagle: otherwise every keep-alive answer waits for the
    # client's delayed ACK (40 ms), for the app and the proxy alike.
    disable_nagle_algorithm = True
    wbufsize = -1

    def do_GET(self):
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def serve(tcp_port, http_port):
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    tcp = socketserver.ThreadingTCPServer(("127.0.0.1", tcp_port), Bytes)
    threading.Thread(target=tcp.serve_forever, daemon=True).start()
    http.server.ThreadingHTTPServer(("127.0.0.1", http_port), App).serve_forever()


def connect(port):
    for _ in range(200):
        try:
            s = socket.create_connection(("127.0.0.1", port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def tcp(port, mib):
    s = connect(port)
    n = mib << 20
    t = time.perf_counter()
    s.sendall(b"D" + n.to_bytes(8, "big"))
    got = 0
    while got < n:
        b = s.recv(1 << 20)
        if not b:
            break
        got += len(b)
    dt = time.perf_counter() - t
    s.close()
    s = connect(port)
    s.sendall(b"E")
    rtts = []
    for _ in range(2000):
        t = time.perf_counter()
        s.sendall(b"x")
        recv_exact(s, 1)
        rtts.append(time.perf_counter() - t)
    s.close()
    print(f"throughput {got / dt / (1 << 20):.0f} MiB/s ({mib} MiB), 1-byte round trip {pct(rtts[100:], 'us', 1e6)}")


def http_get(url, n, header):
    u = urllib.parse.urlsplit(url)
    headers = dict([header.split(": ", 1)]) if header else {}
    c = http.client.HTTPConnection(u.hostname, u.port)
    c.connect()
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for i in range(n + 50):
        t = time.perf_counter()
        c.request("GET", u.path, headers=headers)
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise SystemExit(f"{url}: HTTP {r.status}")
        if i >= 50:
            times.append(time.perf_counter() - t)
    print(pct(times, "ms", 1e3))


def runs(n, cmd):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    print(pct(times, "ms", 1e3))


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] == "serve":
        serve(int(a[1]), int(a[2]))
    elif a[0] == "tcp":
        tcp(int(a[1]), int(a[2]) if len(a) > 2 else 512)
    elif a[0] == "http":
        http_get(a[1], int(a[2]) if len(a) > 2 else 2000, a[3] if len(a) > 3 else None)
    elif a[0] == "runs":
        runs(int(a[1]), a[2:])
