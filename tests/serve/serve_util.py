"""Helpers the weir serve tests share: the model to serve, free ports, and the address a
`weir serve --port 0` prints when it listens."""
import os
import re
import socket
import subprocess

SMOLLM2 = "models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"


def pick_model(weir, shared, tmp, seed=3):
    """SmolLM2 from shared/ when present, else a tiny generated model: (path, extra serve flags)."""
    smol = os.path.join(shared or "", SMOLLM2)
    if shared and os.path.exists(smol):
        return smol, []
    model = os.path.join(tmp, "tiny.gguf")
    subprocess.run([weir, "gen", "--preset", "tiny", "--type", "q8_0", "--seed", str(seed), "-o",
                    model], check=True, capture_output=True)
    return model, ["--chat-template", "chatml"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def listening_port(proc):
    """Reads the server's stderr until it says where it listens; its port, or None."""
    for line in proc.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            return int(m.group(1))
    return None
