#!/usr/bin/env python3
"""Two `weir serve` behind nginx on loopback (docs/deploy.md): requests spread over both, and a
server going down loses no request that had not started.

Starts two servers on a generated tiny model (--port 0), an unprivileged nginx (its own prefix in a
temporary folder) with the recipe of docs/deploy.md, sends requests through it, reads each
server's /metrics to see that both served some, stops one server and checks that every further
request still succeeds (nginx passes a refused connection to the other upstream).
Exit 77 (skipped) when nginx is not installed.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import serve_util

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
if NGINX is None:
    print("skipped: nginx is not installed (Debian: nginx-light)")
    sys.exit(77)

# The recipe of docs/deploy.md, with the test's ports and folders filled in.
CONF = """
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log {tmp}/access.log;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  upstream weir {{
    least_conn;
    server 127.0.0.1:{a} max_fails=1 fail_timeout=10s;
    server 127.0.0.1:{b} max_fails=1 fail_timeout=10s;
  }}
  server {{
    listen 127.0.0.1:{port};
    client_max_body_size 1m;
    location / {{
      proxy_pass http://weir;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 600s;
      proxy_next_upstream error timeout http_503;
    }}
  }}
}}
"""


def start_weir(weir, model):
    p = subprocess.Popen([weir, "serve", "-m", model, "--port", "0", "--chat-template", "chatml",
                          "-t", "1"], stderr=subprocess.PIPE, text=True)
    port = serve_util.listening_port(p)
    if port is None:
        raise RuntimeError("weir serve did not start")
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return p, port
        except Exception:
            time.sleep(0.1)
    raise RuntimeError("weir serve did not load")


def chat(port, text):
    body = json.dumps({"messages": [{"role": "user", "content": text}], "max_tokens": 4,
                       "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, json.loads(r.read())


def served(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(r'^weir_requests_total\{endpoint="/v1/chat/completions",status="200"\} (\d+)$',
                  text, re.M)
    return int(m.group(1)) if m else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weir", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="weir-nginx-")
    model = os.path.join(tmp, "tiny.gguf")
    subprocess.run([args.weir, "gen", "--preset", "tiny", "--type", "q8_0", "--seed", "2", "-o",
                    model], check=True, capture_output=True)
    failures = []
    a, port_a = start_weir(args.weir, model)
    b, port_b = start_weir(args.weir, model)
    port = serve_util.free_port()
    conf = os.path.join(tmp, "nginx.conf")
    with open(conf, "w") as f:
        f.write(CONF.format(tmp=tmp, a=port_a, b=port_b, port=port))
    ngx = subprocess.Popen([NGINX, "-p", tmp, "-c", conf, "-g", "daemon off;"],
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        for i in range(12):
            status, body = chat(port, f"hello {i}")
            if status != 200 or not body["choices"]:
                failures.append(f"request {i} through nginx: {status}")
        na, nb = served(port_a), served(port_b)
        print(f"served: {na} by A, {nb} by B")
        if na == 0 or nb == 0 or na + nb != 12:
            failures.append(f"requests did not spread over both servers: {na} and {nb}")
        a.terminate()
        a.wait(timeout=30)
        for i in range(8):
            try:
                status, _ = chat(port, f"after {i}")
            except Exception as e:  # noqa: BLE001 - any failure is the finding
                status = str(e)
            if status != 200:
                failures.append(f"request {i} after A went down: {status}")
        print(f"after A stopped: B served {served(port_b) - nb} of 8")
    finally:
        ngx.terminate()
        for p in (a, b):
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=30)
        ngx.wait(timeout=30)
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
