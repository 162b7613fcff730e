#!/usr/bin/env python3
"""The chat page of `weir serve` in a real browser: headless Chromium opens /?say=TEXT against a
live server, and the test waits (over the DevTools protocol) until the page shows the streamed
reply and its tok/s line, then keeps a screenshot (build folder, serve_page.png).

SmolLM2 from shared/ when present (else a generated model with the chatml template). Exit 77
(skipped) without chromium. The DevTools client is a few lines of WebSocket over the standard
library: no package needed.
"""
import argparse
import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import serve_util

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
if CHROMIUM is None:
    print("skipped: chromium is not installed (Debian: chromium)")
    sys.exit(77)


class DevTools:
    """A minimal WebSocket client (RFC 6455: masked text frames out, unmasked frames in)."""

    def __init__(self, ws_url):
        m = re.match(r"ws://([^/:]+):(\d+)(/.*)", ws_url)
        self.sock = socket.create_connection((m.group(1), int(m.group(2))), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {m.group(3)} HTTP/1.1\r\nHost: {m.group(1)}:{m.group(2)}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError("DevTools refused the WebSocket: " + head.decode(errors="replace"))
        self.next_id = 0

    def _recv_exact(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise RuntimeError("DevTools closed the connection")
            out += chunk
        return out

    def _recv_message(self):
        data = b""
        while True:
            b0, b1 = self._recv_exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(self._recv_exact(2), "big")
            elif n == 127:
                n = int.from_bytes(self._recv_exact(8), "big")
            data += self._recv_exact(n)
            if b0 & 0x80:
                return data

    def call(self, method, **params):
        self.next_id += 1
        payload = json.dumps({"id": self.next_id, "method": method, "params": params}).encode()
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + n.to_bytes(2, "big") if n < 65536 else
                                bytes([0x80 | 127]) + n.to_bytes(8, "big"))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        while True:
            msg = json.loads(self._recv_message())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weir", required=True)
    ap.add_argument("--shared", default="")
    ap.add_argument("--screenshot", default="serve_page.png")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="weir-page-")
    model, extra = serve_util.pick_model(args.weir, args.shared, tmp)
    server = subprocess.Popen([args.weir, "serve", "-m", model, "--port", "0", "-n", "32",
                               "--temp", "0", *extra], stderr=subprocess.PIPE, text=True)
    port = serve_util.listening_port(server)
    devtools_port = serve_util.free_port()
    browser_log = open(os.path.join(tmp, "chromium.log"), "w")
    browser = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                                "--disable-dev-shm-usage", "--no-first-run",
                                f"--user-data-dir={tmp}/profile",
                                f"--remote-debugging-port={devtools_port}",
                                "--window-size=900,700", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=browser_log)
    failures = []
    try:
        page = None
        deadline = time.time() + 60
        while time.time() < deadline and page is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{devtools_port}/json/list",
                                            timeout=5) as r:
                    pages = [t for t in json.loads(r.read()) if t.get("type") == "page"]
                    page = pages[0] if pages else None
            except Exception:
                time.sleep(0.2)
        if page is None:
            # The browser itself cannot run on this machine (no display libraries, no shared
            # memory, ...): that is not the page's fault. Say why and skip.
            browser_log.flush()
            with open(os.path.join(tmp, "chromium.log")) as f:
                print("skipped: chromium did not start here:\n" + f.read()[-2000:])
            return 77
        dt = DevTools(page["webSocketDebuggerUrl"])
        say = "What is the capital of Germany?"
        dt.call("Page.navigate", url=f"http://127.0.0.1:{port}/?say=" + urllib.request.quote(say))
        state = {}
        deadline = time.time() + 120
        while time.time() < deadline:
            r = dt.call("Runtime.evaluate", returnByValue=True, expression="""(() => {
              const a = document.querySelector('.msg.assistant');
              const u = document.querySelector('.msg.user');
              const e = document.querySelector('.msg.error');
              const s = document.querySelector('.speed');
              return {user: u ? u.textContent : null, error: e ? e.textContent : null,
                      reply: a ? a.firstChild && a.firstChild.textContent : null,
                      speed: s ? s.textContent : null,
                      status: document.getElementById('status').textContent};
            })()""")
            state = r.get("result", {}).get("value") or {}  # none while the page loads
            if state.get("speed") or state.get("error"):
                break
            time.sleep(0.2)
        print("page:", json.dumps(state))
        shot = dt.call("Page.captureScreenshot", format="png")
        with open(args.screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        print("screenshot:", os.path.abspath(args.screenshot))
        if state.get("error"):
            failures.append("the page shows an error: " + state["error"])
        if state.get("user") != say:
            failures.append(f"the user's message is not shown: {state.get('user')!r}")
        if not state.get("reply"):
            failures.append("no streamed reply in the page")
        if not state.get("speed") or "tok/s" not in state["speed"]:
            failures.append(f"no tok/s line under the reply: {state.get('speed')!r}")
        if not state.get("status", "").startswith("model: "):
            failures.append(f"the header does not name the model: {state.get('status')!r}")
        if model.endswith(serve_util.SMOLLM2) and state.get("reply") and "Berlin" not in state["reply"]:
            failures.append(f"SmolLM2's greedy-ish reply should name Berlin: {state['reply']!r}")
    finally:
        browser.terminate()
        server.terminate()
        browser.wait(timeout=30)
        server.wait(timeout=30)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
