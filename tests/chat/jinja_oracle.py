#!/usr/bin/python3
"""Oracle for weir's chat-template renderer: Python jinja2, configured as transformers'
apply_chat_template configures it (trim_blocks, lstrip_blocks, raise_exception, tojson as
json.dumps(ensure_ascii=False)), renders the same templates on the same conversations; the
outputs must be equal byte for byte, and a conversation jinja2 refuses (raise_exception, a type
error) must make weir fail too.

  jinja_oracle.py --weir BUILD/bin/weir [--shared ../shared]
  jinja_oracle.py --context CONTEXT.json --render TEMPLATE...

The second form renders each template file with one context (a JSON object) into TEMPLATE.out,
or writes why jinja2 refused it into TEMPLATE.err, for tests that compare renderings of weir's
in-process (tests/chat/jinja_macro_test.cc); one run serves many templates, as starting Python
and importing jinja2 costs more than rendering.

Templates: every file in tests/chat/templates/ (SmolLM2's own, Qwen2.5, Qwen3, Llama 3.1 and a
feature sampler), every built-in of weir (`weir template --chat-template NAME --source`), and the
template inside SmolLM2's GGUF when shared/ has it. Conversations: tests/chat/conversations.json,
each with add_generation_prompt true and false. Exit 0 when all agree, 1 otherwise, 77 when
jinja2 is missing.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:
    print("skipped: %s (pip install jinja2==3.1.6)" % e)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
BUILTINS = ["chatml", "llama3", "gemma", "phi3", "mistral"]


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def render_files(env, template_paths, context_path):
    ctx = {}
    if context_path:
        with open(context_path, encoding="utf-8") as f:
            ctx = json.load(f)
    for path in template_paths:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        try:
            out, suffix = env.from_string(source).render(**ctx), ".out"
        except Exception as e:  # noqa: BLE001  the caller compares refusals too
            out, suffix = "%s: %s" % (type(e).__name__, e), ".err"
        with open(path + suffix, "wb") as f:
            f.write(out.encode("utf-8"))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weir")
    ap.add_argument("--shared", default=os.path.join(HERE, "..", "..", "..", "shared"))
    ap.add_argument("--render", metavar="TEMPLATE", nargs="+")
    ap.add_argument("--context", metavar="CONTEXT.json")
    args = ap.parse_args()
    env = make_env()
    if args.render:
        return render_files(env, args.render, args.context)
    if not args.weir:
        ap.error("--weir is required unless --render is given")

    templates = {}
    tdir = os.path.join(HERE, "templates")
    for name in sorted(os.listdir(tdir)):
        with open(os.path.join(tdir, name), encoding="utf-8") as f:
            templates[name] = f.read()
    for name in BUILTINS:
        r = subprocess.run([args.weir, "template", "--chat-template", name, "--source"],
                           capture_output=True)
        if r.returncode != 0:
            print("FAIL: weir template --chat-template %s --source: %s" % (name, r.stderr.decode()))
            return 1
        templates["builtin:" + name] = r.stdout.decode("utf-8")
    smollm = os.path.join(args.shared, "models", "smollm2-135m-instruct",
                          "SmolLM2-135M-Instruct.Q4_1.gguf")
    try:
        import gguf
        if os.path.exists(smollm):
            f = gguf.GGUFReader(smollm).fields.get("tokenizer.chat_template")
            if f is not None:
                templates["file:SmolLM2 GGUF"] = f.contents()
        else:
            print("skipped: %s absent" % smollm)
    except ImportError:
        print("skipped: SmolLM2's in-file template (no gguf package)")

    with open(os.path.join(HERE, "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)

    failures = compared = refused = 0
    with tempfile.TemporaryDirectory() as tmp:
        for tname, source in templates.items():
            tpath = os.path.join(tmp, "t.jinja")
            with open(tpath, "w", encoding="utf-8") as f:
                f.write(source)
            jt = env.from_string(source)
            agree = 0
            for conv in conversations:
                for gen in (True, False):
                    ctx = {k: v for k, v in conv.items() if k != "name"}
                    ctx.update(add_generation_prompt=gen, bos_token="<s>", eos_token="</s>")
                    try:
                        want, want_error = jt.render(**ctx), None
                    except Exception as e:  # noqa: BLE001  jinja2 refusing is an expected outcome
                        want, want_error = None, "%s: %s" % (type(e).__name__, e)
                    cpath = os.path.join(tmp, "ctx.json")
                    with open(cpath, "w", encoding="utf-8") as f:
                        json.dump(ctx, f, ensure_ascii=False)
                    r = subprocess.run([args.weir, "template", "--template-file", tpath,
                                        "--context", cpath], capture_output=True)
                    got = r.stdout.decode("utf-8", errors="replace") if r.returncode == 0 else None
                    compared += 1
                    label = "%s / %s / add_generation_prompt=%s" % (tname, conv["name"], gen)
                    if want_error is not None:
                        if got is not None:
                            failures += 1
                            print("FAIL: %s: jinja2 refused (%s) but weir rendered %r" %
                                  (label, want_error, got[:200]))
                        else:
                            refused += 1
                            agree += 1
                        continue
                    if got != want:
                        failures += 1
                        print("FAIL: %s\n  jinja2: %r\n  weir:   %r\n  weir stderr: %s" %
                              (label, want, got, r.stderr.decode(errors="replace").strip()))
                    else:
                        agree += 1
            print("ok: %s: %d of %d renderings equal" % (tname, agree, 2 * len(conversations))
                  if agree == 2 * len(conversations) else
                  "FAIL: %s: %d of %d renderings equal" % (tname, agree, 2 * len(conversations)))
    print("%d renderings compared (%d refused by both), %d failures" % (compared, refused, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
