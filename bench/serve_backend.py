#!/usr/bin/env python3
"""Replica server for bench/serve.sh: a minimal HTTP/1.1 keep-alive server on asyncio's
protocol layer (no per-request threads or parsing libraries), so that on one core it answers
tens of thousands of small GETs a second and is not what the proxies are measured against.

  python3 serve_backend.py [PORT]      # default: $PORT (what berth gives a replica)

Paths: /healthz and anything else answer 200 "ok\n"; /slow waits 200 ms first (the
autoscaling figure's load). With $BENCH_PORT_DIR set, it writes "PID PORT" to
$BENCH_PORT_DIR/<pid> once listening, so the bench finds each replica's port and process
(a job's /tmp is private: the directory must be elsewhere).
"""
import asyncio
import os
import sys

OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n"


class Http(asyncio.Protocol):
    def connection_made(self, transport):
        self.t = transport
        self.buf = b""

    def data_received(self, data):
        self.buf += data
        # Requests have no body (GETs): each ends at the blank line.
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self.buf = self.buf[:end], self.buf[end + 4:]
            line = head.split(b"\r\n", 1)[0]
            parts = line.split(b" ")
            path = parts[1] if len(parts) > 1 else b"/"
            if path.startswith(b"/slow") or b"/slow" in path:
                # (no pipelining: clients send the next request after this answer)
                asyncio.get_running_loop().call_later(0.2, self.reply)
            else:
                self.reply()

    def reply(self):
        if not self.t.is_closing():
            self.t.write(OK)


async def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ["PORT"])
    loop = asyncio.get_running_loop()
    # BENCH_BIND: the address to listen on (0.0.0.0: every address, for the tunnel's figure)
    bind = os.environ.get("BENCH_BIND", "127.0.0.1")
    srv = await loop.create_server(Http, bind, port, backlog=1024, reuse_address=True)
    d = os.environ.get("BENCH_PORT_DIR")
    if d:
        tmp = os.path.join(d, f".{os.getpid()}")
        with open(tmp, "w") as f:
            f.write(f"{os.getpid()} {port}\n")
        os.rename(tmp, os.path.join(d, str(os.getpid())))
    async with srv:
        await srv.serve_forever()


asyncio.run(main())
