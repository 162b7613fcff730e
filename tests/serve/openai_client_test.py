#!/usr/bin/env python3
"""weir serve against the official OpenAI Python client and raw HTTP (docs/serve.md).

Starts real `weir serve` processes on loopback ports (SmolLM2 from shared/ when present, else a
tiny generated model with the chatml template) and checks: plain and streamed chat and
completions (the streamed text equals the plain one under greedy sampling), usage, stop strings,
8 concurrent requests on 4 slots giving each the text it gets alone, the error bodies and
statuses (400, 401, 404, 413, 503 with Retry-After), a client that disconnects mid-stream
freeing its slot, /tokenize and /detokenize, /metrics, /health and the chat page.
Exit 77 (skipped) without the openai package.
"""
import argparse
import concurrent.futures
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import serve_util

try:
    import openai
except ImportError:
    print("skipped: the openai package is not installed (pip install openai)")
    sys.exit(77)

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)


class Server:
    def __init__(self, weir, model, *flags):
        self.proc = subprocess.Popen([weir, "serve", "-m", model, "--port", "0", *flags],
                                     stderr=subprocess.PIPE, text=True)
        self.port = serve_util.listening_port(self.proc)
        if self.port is None:
            raise RuntimeError("weir serve did not start: " + self.proc.stderr.read())
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 120
        while time.time() < deadline:
            code, body = self.get("/health")
            if code == 200:
                break
            check(code == 503 and json.loads(body)["status"] == "loading", "health while loading")
            time.sleep(0.2)
        else:
            raise RuntimeError("the model did not load")

    def request(self, method, path, body=None, headers=None):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers=headers or {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    def get(self, path):
        code, body, _ = self.request("GET", path)
        return code, body

    def client(self, key="none"):
        return openai.OpenAI(base_url=self.base + "/v1", api_key=key, max_retries=0, timeout=120)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        check(self.proc.returncode == 0, f"weir serve exits 0 on SIGTERM (got {self.proc.returncode})")


def chat_text(client, content, **kw):
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": content}],
                                       temperature=0, **kw)
    return r


def stream_chat(client, content, **kw):
    text, finish, usage, roles = "", None, None, []
    for chunk in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": content}], temperature=0,
            stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    return text, finish, usage, roles


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weir", required=True)
    ap.add_argument("--shared", default="")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="weir-serve-")
    model, extra = serve_util.pick_model(args.weir, args.shared, tmp)
    print("model:", model, flush=True)

    s = Server(args.weir, model, "--parallel", "4", "--queue", "8", "--max-body", "65536", *extra)
    try:
        c = s.client()
        models = c.models.list()
        check(len(models.data) == 1 and models.data[0].id, "/v1/models lists the model")

        prompt = "Write one sentence about rivers."
        plain = chat_text(c, prompt, max_tokens=24)
        text = plain.choices[0].message.content
        check(isinstance(text, str) and text, "chat completion has text")
        check(plain.object == "chat.completion" and plain.choices[0].message.role == "assistant",
              "chat completion shape")
        check(plain.choices[0].finish_reason in ("stop", "length"), "finish_reason")
        u = plain.usage
        check(0 < u.completion_tokens <= 24 and u.prompt_tokens > 0 and
              u.total_tokens == u.prompt_tokens + u.completion_tokens, f"usage {u}")

        st_text, st_finish, st_usage, roles = stream_chat(c, prompt, max_tokens=24)
        check(st_text == text, f"streamed text equals the plain text: {st_text!r} vs {text!r}")
        check(st_finish == plain.choices[0].finish_reason, "streamed finish_reason")
        check(st_usage is not None and st_usage.completion_tokens == u.completion_tokens,
              "streamed usage")
        check(roles == ["assistant"], f"the role comes once, first: {roles}")

        comp = c.completions.create(model="m", prompt="The river", max_tokens=12, temperature=0)
        ctext = comp.choices[0].text
        check(comp.object == "text_completion" and ctext, "completion shape and text")
        streamed = "".join(ch.choices[0].text for ch in c.completions.create(
            model="m", prompt="The river", max_tokens=12, temperature=0, stream=True)
            if ch.choices)
        check(streamed == ctext, f"streamed completion equals plain: {streamed!r} vs {ctext!r}")

        # A stop string from the middle of the greedy reply cuts it there.
        long = chat_text(c, prompt, max_tokens=40).choices[0].message.content
        # (A generated model's reply is random bytes: no stop string can be typed from it.)
        if len(long) > 12 and long[6:10].isprintable() and "\ufffd" not in long:
            stop = long[6:10]
            cut = long[:long.find(stop)]
            r = chat_text(c, prompt, max_tokens=40, stop=[stop])
            check(r.choices[0].message.content == cut and r.choices[0].finish_reason == "stop",
                  f"stop string {stop!r}: {r.choices[0].message.content!r} vs {cut!r}")
            st, fin, _, _ = stream_chat(c, prompt, max_tokens=40, stop=stop)
            check(st == cut and fin == "stop", f"streamed stop string: {st!r} vs {cut!r}")

        # 8 concurrent requests on 4 slots: each gets the text it gets alone.
        prompts = [f"Name a colour number {i}." for i in range(8)]
        alone = [chat_text(c, p, max_tokens=16).choices[0].message.content for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            together = list(pool.map(
                lambda p: chat_text(c, p, max_tokens=16).choices[0].message.content, prompts))
        check(together == alone, "concurrent requests give the same texts as alone")
        # ... and their decode steps ran as batches (continuous batching): more than one token
        # per step on average since the start.
        m = re.search(r"^weir_decode_batch_size ([0-9.]+)$", s.get("/metrics")[1], re.M)
        check(m is not None and float(m.group(1)) > 1.0,
              f"concurrent decode steps ran as batches ({m.group(1) if m else 'no metric'})")

        # Errors.
        code, body, _ = s.request("POST", "/v1/chat/completions", b"{not json")
        check(code == 400 and json.loads(body)["error"]["type"] == "invalid_request_error",
              f"bad JSON -> 400 ({code})")
        code, body, _ = s.request("POST", "/v1/chat/completions",
                                  {"messages": [{"role": "user", "content": "hi"}], "temperature": 5})
        check(code == 400 and json.loads(body)["error"]["param"] == "temperature",
              f"temperature 5 -> 400 naming it ({code} {body})")
        try:
            c.chat.completions.create(model="m", messages=[], max_tokens=4)
            check(False, "empty messages refused")
        except openai.BadRequestError:
            pass
        code, body, _ = s.request("GET", "/v1/nothing")
        check(code == 404 and "error" in json.loads(body), f"unknown route -> 404 ({code})")
        big = {"messages": [{"role": "user", "content": "x" * 100000}]}
        code, body, _ = s.request("POST", "/v1/chat/completions", big)
        check(code == 413 and "error" in json.loads(body), f"oversized body -> 413 ({code})")

        # A client that disconnects mid-stream frees its slot.
        before = s.get("/metrics")[1]
        sock = socket.create_connection(("127.0.0.1", s.port))
        req = json.dumps({"messages": [{"role": "user", "content": "Tell a long story."}],
                          "max_tokens": 2000, "stream": True, "temperature": 0}).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: " + str(len(req)).encode() +
                     b"\r\n\r\n" + req)
        got = b""
        while got.count(b"data: ") < 3:
            got += sock.recv(4096)
        sock.close()
        cancelled = 0
        deadline = time.time() + 30
        while time.time() < deadline:
            m = re.search(r"^weir_cancelled_total (\d+)$", s.get("/metrics")[1], re.M)
            cancelled = int(m.group(1)) if m else 0
            busy = re.search(r"^weir_slots_busy (\d+)$", s.get("/metrics")[1], re.M)
            if cancelled >= 1 and busy and busy.group(1) == "0":
                break
            time.sleep(0.1)
        check(cancelled >= 1, "a disconnected stream is cancelled")
        check("weir_requests_total" in before, "/metrics has the request counter")

        code, body, _ = s.request("POST", "/tokenize", {"content": "Hello world"})
        ids = json.loads(body)["tokens"]
        check(code == 200 and ids and all(isinstance(i, int) for i in ids), "/tokenize")
        code, body, _ = s.request("POST", "/detokenize", {"tokens": ids})
        check(code == 200 and json.loads(body)["content"] == "Hello world", f"/detokenize {body}")
        code, body, _ = s.request("POST", "/detokenize", {"tokens": [-1]})
        check(code == 400, "/detokenize refuses a bad id")
        code, page = s.get("/")
        check(code == 200 and "<title>weir chat</title>" in page, "the chat page")
    finally:
        s.stop()

    # One slot, no queue: a second request while the first streams gets 503 with Retry-After.
    # With --api-key, requests without the key get 401.
    s = Server(args.weir, model, "--parallel", "1", "--queue", "0", "--api-key", "sekret", *extra)
    try:
        code, body, _ = s.request("GET", "/v1/models")
        check(code == 401 and json.loads(body)["error"]["type"] == "authentication_error",
              f"no key -> 401 ({code})")
        c = s.client("sekret")
        stream = c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Tell a long story."}],
            max_tokens=400, temperature=0, stream=True)
        next(iter(stream))
        code, body, headers = s.request(
            "POST", "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            headers={"Content-Type": "application/json", "Authorization": "Bearer sekret"})
        check(code == 503 and headers.get("Retry-After") == "1", f"queue full -> 503 ({code})")
        stream.close()
    finally:
        s.stop()

    # A streamed pack with two slots: both share one budget and one weight cache, and each
    # request gets the text it gets alone. A budget that cannot hold the slots is refused.
    pack = os.path.join(tmp, "m.weir")
    subprocess.run([args.weir, "pack", "-m", model, "-o", pack], check=True, capture_output=True)
    r = subprocess.run([args.weir, "serve", "-m", pack, "--port", "0", "--parallel", "2",
                        "--memory", "1MiB", *extra], capture_output=True, text=True, timeout=120)
    check(r.returncode != 0 and "is below the minimum" in r.stderr,
          f"a pack under a budget too small for two slots is refused: {r.stderr[-300:]!r}")
    s = Server(args.weir, pack, "--parallel", "2", "-c", "512", *extra)
    try:
        c = s.client()
        prompts = [f"Name a river number {i}." for i in range(2)]
        alone = [chat_text(c, p, max_tokens=12).choices[0].message.content for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            together = list(pool.map(
                lambda p: chat_text(c, p, max_tokens=12).choices[0].message.content, prompts))
        check(together == alone, "a streamed pack's two slots give the same texts as alone")
    finally:
        s.stop()

    if FAILURES:
        print(f"{len(FAILURES)} checks failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
