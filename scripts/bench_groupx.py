#!/usr/bin/env python3
"""GroupX face benchmark against a running daemon (stdlib only; see scripts/bench-groupx).

  post     sequential POST /api/messages -> 202 on one keep-alive connection (each creates a
           durable message + queued turn in one commit): p50/p99 latency
  posts    the same from C concurrent connections: aggregate commands/s
  turn     POST -> turn.completed seen on the SSE stream, sequential, through a real ACP agent
           (the fake agent answers at once): end-to-end turn round trip p50/p99
  fanout   S SSE readers, M posts: durable events delivered per second to all readers
  boot     GET /api/bootstrap on the resulting room: p50
"""
from __future__ import annotations

import argparse
import http.client
import json
import statistics
import threading
import time
import uuid


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


class C:
    def __init__(self, host, port):
        self.c = http.client.HTTPConnection(host, port, timeout=30)

    def post(self, to, content):
        body = json.dumps({"clientCommandId": str(uuid.uuid4()), "to": to, "content": content})
        self.c.request("POST", "/api/messages", body=body, headers={"Content-Type": "application/json"})
        r = self.c.getresponse()
        data = r.read()
        assert r.status == 202, (r.status, data)
        return json.loads(data)

    def get(self, path):
        self.c.request("GET", path)
        r = self.c.getresponse()
        return r.status, r.read()


class Stream:
    def __init__(self, host, port, after):
        self.c = http.client.HTTPConnection(host, port, timeout=60)
        self.c.request("GET", f"/api/events?afterSeq={after}")
        self.r = self.c.getresponse()
        self.count = 0
        self.seen = {}
        self.cv = threading.Condition()
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        data = []
        while True:
            line = self.r.fp.readline()
            if not line:
                return
            line = line.rstrip(b"\n")
            if not line:
                if data:
                    env = json.loads(b"\n".join(data))
                    with self.cv:
                        if env.get("seq") is not None:
                            self.count += 1
                        if env["type"] in ("turn.completed", "turn.failed"):
                            self.seen[env["body"]["turnId"]] = time.perf_counter()
                        self.cv.notify_all()
                data = []
            elif line.startswith(b"data: "):
                data.append(line[6:])

    def wait_turn(self, tid, timeout=30):
        with self.cv:
            self.cv.wait_for(lambda: tid in self.seen, timeout)
            return self.seen.get(tid)

    def wait_count(self, n, timeout=120):
        with self.cv:
            return self.cv.wait_for(lambda: self.count >= n, timeout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--agent", default="agent:echo")
    ap.add_argument("--post-n", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--turn-n", type=int, default=200)
    ap.add_argument("--readers", type=int, default=10)
    ap.add_argument("--fanout-n", type=int, default=500)
    ap.add_argument("--json-out")
    a = ap.parse_args()
    host, port = a.addr.rsplit(":", 1)
    port = int(port)
    out = {}
    c = C(host, port)

    lat = []
    for i in range(a.post_n):
        t0 = time.perf_counter()
        c.post([a.agent], f"bench {i} #reply ok")
        lat.append((time.perf_counter() - t0) * 1000)
    out["post_p50_ms"], out["post_p99_ms"] = pct(lat, 50), pct(lat, 99)

    per = a.post_n // a.clients
    def worker():
        w = C(host, port)
        for i in range(per):
            w.post([a.agent], f"load {i} #reply ok")
    ts = [threading.Thread(target=worker) for _ in range(a.clients)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out["posts_per_s"] = per * a.clients / (time.perf_counter() - t0)

    # Let the lane drain the queued turns before timing single turns.
    deadline = time.time() + 600
    while time.time() < deadline:
        st, body = c.get("/api/bootstrap")
        if not json.loads(body)["turns"]:
            break
        time.sleep(0.2)
    head = json.loads(c.get("/api/bootstrap")[1])["cursor"]
    s = Stream(host, port, head)
    rt = []
    for i in range(a.turn_n):
        t0 = time.perf_counter()
        v = c.post([a.agent], f"turn {i}")
        done = s.wait_turn(v["turns"][0]["turnId"])
        assert done, "turn did not finish"
        rt.append((done - t0) * 1000)
    out["turn_p50_ms"], out["turn_p99_ms"] = pct(rt, 50), pct(rt, 99)

    head = json.loads(c.get("/api/bootstrap")[1])["cursor"]
    readers = [Stream(host, port, head) for _ in range(a.readers)]
    time.sleep(0.3)
    t0 = time.perf_counter()
    for i in range(a.fanout_n):
        c.post([a.agent], f"fan {i} #reply ok")
    # Each post makes at least 2 durable events (message + turn.queued).
    for r in readers:
        assert r.wait_count(2 * a.fanout_n), "fan-out incomplete"
    el = time.perf_counter() - t0
    out["fanout_deliveries_per_s"] = sum(r.count for r in readers) / el

    bl = []
    for _ in range(50):
        t0 = time.perf_counter()
        st, _ = c.get("/api/bootstrap")
        bl.append((time.perf_counter() - t0) * 1000)
    out["bootstrap_p50_ms"] = pct(bl, 50)
    out["room_events"] = json.loads(c.get("/api/bootstrap")[1])["cursor"]
    for k, v in out.items():
        print(f"{k:26} {v:12.2f}" if isinstance(v, float) else f"{k:26} {v:12}")
    if a.json_out:
        json.dump(out, open(a.json_out, "w"))


if __name__ == "__main__":
    main()
