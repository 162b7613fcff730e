#!/usr/bin/env python3
"""weir serve against hostile and broken clients, on loopback, bounded in count and time
(docs/reliability.md, section 5).

One `weir serve` (SmolLM2 from shared/ when present, else a tiny generated model), two slots, a
queue of 4. Checked, with /health asked between the phases and expected to answer 200 within
5 s:
  1. malformed requests: invalid JSON, wrong types, bad headers (Content-Length that is
     negative, not a number or larger than the body), an unknown method, a body over --max-body:
     each gets a well-formed HTTP answer (4xx with a JSON error body where a body is sent) or a
     clean close, never a 5xx;
  2. 100 connections that send a request line and then one header byte per second (slowloris)
     while /health is asked: it answers within 5 s;
  3. 100 concurrent real requests (4 tokens each): every one gets 200 or 503 (queue full), each a
     well-formed JSON body;
  4. clients that go away: mid-headers, mid-body, mid-stream, and one that asks for a long stream
     and reads none of it for 10 s (/health answers meanwhile) before it goes; afterwards both
     slots are free again and both abandoned streams were cancelled;
  5. 400 random requests (seeded mutations of valid ones: bytes flipped, cut, duplicated,
     spliced, random methods and paths): every answer is well-formed HTTP or a clean close;
  6. the server's RSS after all of it is within 64 MiB of its RSS after phase 1's warm-up, and it
     exits 0 on SIGTERM.
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

import serve_util

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def raw(port, data, timeout=30.0, read=True):
    """Sends raw bytes; returns (status or None, headers text, body bytes). None: the server
    closed without an answer (a clean close)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except OSError:
            pass  # the server closed first (it refused what it had read)
        # No half-close: cpp-httplib drops a connection whose client shut its write side.
        if not read:
            return None, "", b""
        got = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            got += chunk
    finally:
        s.close()
    if not got:
        return None, "", b""
    head, _, body = got.partition(b"\r\n\r\n")
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", head)
    if not m:
        return -1, head.decode("latin-1"), body
    return int(m.group(1)), head.decode("latin-1"), body


def post(path, body, extra=b""):
    if isinstance(body, str):
        body = body.encode()
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            b"\r\nConnection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" +
            extra + b"\r\n" + body)


def well_formed(status, head, body):
    """A status line and, for an error with a body, a JSON error object."""
    if status is None:
        return True  # a clean close
    if status == -1:
        return False
    if status >= 500 and status != 503:
        return False
    if status >= 400 and body:
        if "chunked" in head.lower():
            return True
        try:
            return "error" in json.loads(body)
        except ValueError:
            return False
    return True


def health(port, limit=5.0):
    t0 = time.time()
    try:
        status, _, body = raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                              timeout=limit)
    except OSError:
        return False, time.time() - t0
    return status == 200 and b'"ok"' in body, time.time() - t0


def metric(port, name):
    _, _, body = raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    m = re.search(rb"^" + name.encode() + rb" (\d+)$", body, re.M)
    return int(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weir", required=True)
    ap.add_argument("--shared", default="")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    model, extra = serve_util.pick_model(args.weir, args.shared, tmp)
    proc = subprocess.Popen([args.weir, "serve", "-m", model, "--port", "0", "--parallel", "2",
                             "--queue", "4", "--max-body", "65536", "-t", "2", "--temp", "0",
                             *extra], stderr=subprocess.PIPE, text=True)
    port = serve_util.listening_port(proc)
    if port is None:
        print("weir serve did not start")
        return 1
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    deadline = time.time() + 120
    while time.time() < deadline and not health(port, 10)[0]:
        time.sleep(0.2)
    chat = json.dumps({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4,
                       "temperature": 0})
    try:
        # Warm-up, then the baseline RSS.
        status, _, body = raw(port, post("/v1/chat/completions", chat))
        check(status == 200 and json.loads(body)["choices"], "a valid request works (%s)" % status)
        rss0 = rss_kib(proc.pid)

        # 1. Malformed requests.
        bad_bodies = ["{", "[]", "null", "\"x\"", "{\"messages\": 5}", "{\"messages\": []}",
                      "{\"messages\": [{\"role\": \"user\"}]}",
                      "{\"messages\": [{\"role\": 7, \"content\": \"x\"}]}",
                      "{\"messages\": [{\"role\": \"user\", \"content\": {\"a\": 1}}]}",
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": \"many\"}",
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": -5}",
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 1e300}",
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"temperature\": \"hot\"}",
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream\": \"yes\"}",
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stop\": 7}",
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stop\": [1, 2]}",
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"\\ud800\"}]}",
                      "{\"prompt\": \"x\", \"n\": 100}", "\xff\xfe\x00garbage", "{" * 100000]
        for i, b in enumerate(bad_bodies):
            for path in ("/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"):
                st, head, body = raw(port, post(path, b.encode("utf-8", "surrogatepass")
                                                if isinstance(b, str) else b))
                check(well_formed(st, head, body) and st is not None and 200 <= st < 500,
                      "bad body %d on %s -> %s %r" % (i, path, st, body[:120]))
                if path == "/v1/chat/completions":
                    check(st in (400, 413), "bad chat body %d -> 400 or 413 (%s)" % (i, st))
        heads = [b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}",
                 b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}",
                 b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n{}",
                 b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{}",
                 b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                 b"BREW /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n",
                 b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
                 b"GET /health HTTP/1.1\r\n" + b"X-A: b\r\n" * 2000 + b"\r\n",
                 b"\x00\x01\x02\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n"]
        for i, h in enumerate(heads):
            st, head, body = raw(port, h)
            check(well_formed(st, head, body), "bad head %d -> %s %r" % (i, st, head[:80]))
        big = post("/v1/chat/completions", json.dumps(
            {"messages": [{"role": "user", "content": "x" * 200000}]}))
        st, head, body = raw(port, big)
        check(st in (413, None), "a body over --max-body -> 413 or a close (%s)" % st)
        ok, dt = health(port)
        check(ok, "/health after malformed requests (%.1f s)" % dt)

        # 2. 100 slowloris connections, /health asked meanwhile.
        slow = []
        for _ in range(100):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)
        worst = 0.0
        for _ in range(6):
            for s in slow:
                try:
                    s.sendall(b"X")
                except OSError:
                    pass
            ok, dt = health(port)
            worst = max(worst, dt)
            check(ok, "/health answers while 100 slow clients are connected (%.1f s)" % dt)
            time.sleep(1)
        for s in slow:
            s.close()
        print("slowloris: /health worst %.2f s" % worst)

        # 3. 100 concurrent real requests.
        def one(_):
            return raw(port, post("/v1/chat/completions", chat), timeout=120)
        with concurrent.futures.ThreadPoolExecutor(100) as ex:
            results = list(ex.map(one, range(100)))
        codes = {}
        for st, head, body in results:
            codes[st] = codes.get(st, 0) + 1
            check(st in (200, 503) and well_formed(st, head, body),
                  "a concurrent request -> %s %r" % (st, body[:80]))
        print("100 concurrent requests:", codes)
        check(codes.get(200, 0) >= 2, "some concurrent requests were served")

        # 4. Clients that go away.
        cancelled0 = metric(port, "weir_cancelled_total") or 0
        full = post("/v1/chat/completions", chat)
        raw(port, full[:30], read=False)                       # mid-headers
        raw(port, full[:len(full) - 10], read=False)           # mid-body
        long_stream = post("/v1/chat/completions", json.dumps(
            {"messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 4000,
             "stream": True, "temperature": 0}))
        s = socket.create_connection(("127.0.0.1", port), timeout=60)  # mid-stream
        s.sendall(long_stream)
        got = b""
        while got.count(b"data: ") < 2:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        s.close()
        check(got.count(b"data: ") >= 2, "the long stream started: %r" % got[:200])
        stuck = socket.create_connection(("127.0.0.1", port))  # never reads its stream
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.sendall(long_stream)
        for _ in range(5):  # 10 s of not reading: the server goes on answering
            time.sleep(2)
            ok, dt = health(port)
            check(ok, "/health while a client does not read its stream (%.1f s)" % dt)
        stuck.close()
        deadline = time.time() + 60
        busy = None
        while time.time() < deadline:
            busy = metric(port, "weir_slots_busy")
            if busy == 0:
                break
            time.sleep(0.5)
        cancelled = (metric(port, "weir_cancelled_total") or 0) - cancelled0
        check(busy == 0, "both slots free after the clients went away (busy %s)" % busy)
        if not extra:  # SmolLM2: still generating when the clients leave
            check(cancelled >= 2, "the abandoned streams were cancelled (%d)" % cancelled)
        else:  # the tiny model writes all 4,000 tokens into the socket buffers first
            print("abandoned streams cancelled: %d (tiny model, not checked)" % cancelled)
        ok, dt = health(port)
        check(ok, "/health after disconnects (%.1f s)" % dt)

        # 5. Random requests: seeded mutations of valid ones.
        rng = random.Random(args.seed)
        valid = [post("/v1/chat/completions", chat),
                 post("/v1/completions", json.dumps({"prompt": "Hi", "max_tokens": 2})),
                 post("/tokenize", json.dumps({"content": "Hello"})),
                 post("/detokenize", json.dumps({"tokens": [1, 2, 3]})),
                 b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"]
        mutated = []
        for i in range(400):
            d = bytearray(rng.choice(valid))
            for _ in range(rng.randint(1, 6)):
                op = rng.randrange(5)
                p = rng.randrange(len(d)) if d else 0
                if op == 0 and d:
                    d[p] = rng.randrange(256)
                elif op == 1:
                    d = d[:p]
                elif op == 2:
                    d[p:p] = d[p:p + rng.randint(1, 64)]
                elif op == 3:
                    d[p:p] = rng.choice(valid)[:rng.randint(1, 80)]
                else:
                    d[p:p] = rng.choice([b"\r\n", b"\x00", b"{", b"\"", b"9" * 30, b"%",
                                         b"Content-Length: 5\r\n", b"\xff"])
            mutated.append(bytes(d))
        # 50 at a time: a request cut short waits out the server's 5 s read timeout.
        with concurrent.futures.ThreadPoolExecutor(50) as ex:
            answers = list(ex.map(lambda d: raw(port, d, timeout=60), mutated))
        bad = 0
        for i, (st, head, body) in enumerate(answers):
            if not well_formed(st, head, body):
                bad += 1
                check(False, "random request %d -> %s %r" % (i, st, (head + "|").encode()[:100]))
        print("random requests: 400 sent, %d answers not well formed" % bad)
        ok, dt = health(port)
        check(ok, "/health after random requests (%.1f s)" % dt)

        # 6. Memory.
        rss1 = rss_kib(proc.pid)
        print("RSS %.1f MiB after warm-up, %.1f MiB at the end" % (rss0 / 1024, rss1 / 1024))
        check(rss1 <= rss0 + 64 * 1024, "RSS grew by at most 64 MiB (%.1f -> %.1f MiB)" %
              (rss0 / 1024, rss1 / 1024))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    check(proc.returncode == 0, "weir serve exits 0 on SIGTERM (%s)" % proc.returncode)
    if FAILURES:
        print("%d failures" % len(FAILURES))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
