#!/usr/bin/env python3
"""Checks weir's quantized types against gguf-py, the GGUF package of llama.cpp.

  check_quant_types.py BUILD/bin/weir_tensor_tests [--shared DIR]   (DIR: ../shared by default)

Needs numpy and gguf-py, written against gguf==0.19.0 (pip install --break-system-packages
gguf==0.19.0 into the python3 that runs it). Without the gguf package the script prints
"skipped: ..." and exits 77, ctest's skip code.

weir's numbers come from the GoogleTest binary (tests/tensor/quant_types_test.cc), through files
in a temporary directory (raw little-endian, no headers; NAME is the ggml spelling, e.g. Q4_K):
  WEIR_QUANT_DUMP=<dir>, test QuantOracleIo.DumpRandomRows: for every type weir has, writes
      NAME.in.f32 (seeded f32 inputs), NAME.q.bin (weir's quantized blocks), NAME.deq.f32 (weir's
      dequantization of NAME.q.bin).
  WEIR_QUANT_IN=<dir>, test QuantOracleIo.DequantizeGivenBlocks: for every NAME.bin in <dir>
      (whole blocks of type NAME) writes NAME.out.f32, weir's dequantization.

Checks, each printed as "ok: ...", "FAIL: ..." or "skipped: ...":
  1. Every type: gguf.quants.dequantize of weir's bytes equals weir's dequantized output bit for
     bit (float32 bit patterns, so -0.0 != 0.0).
  2. Types gguf-py can quantize (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; not the K types):
     per block, weir's rms error <= gguf-py's (max ratio reported), and how many blocks have
     identical bytes.
  3. Real files when present (else "skipped"): SmolLM2-135M Q4_1 (Q4_1, Q8_0 tensors) and
     Gemma 3 270M Q4_K_M (Q5_0, Q4_K, Q6_K, Q8_0): slices of a few tensors of each type are
     dequantized by weir and by gguf-py and must agree bit for bit.
Exit code 0 when nothing failed.
"""

import importlib.metadata
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QT
except ImportError:
    # 77: ctest's skip code (SKIP_RETURN_CODE in tests/CMakeLists.txt), so the run shows Skipped.
    print("skipped: the gguf package is not installed "
          "(pip install --break-system-packages gguf==0.19.0)")
    sys.exit(77)

# ../shared beside the repository, or --shared DIR (main).
SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared")
SMOLLM_REL = "models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = os.path.expanduser("~/.cache/weir/models/gemma-3-270m-Q4_K_M.gguf")
ROWS_PER_TENSOR = 256  # rows of each model tensor compared (the whole tensor when smaller)
TENSORS_PER_TYPE = 4   # first, last and evenly spaced between

failures = []
skips = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def skip(what):
    print("skipped: " + what)
    skips.append(what)


def run_gtest(binary, test, env_var, directory):
    env = dict(os.environ, **{env_var: directory})
    proc = subprocess.run([binary, "--gtest_filter=" + test], env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0 or "[  PASSED  ] 1 test" not in proc.stdout:
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        check(False, f"{test} ran ({binary}, exit {proc.returncode})")
        return False
    return True


def bits_equal(a, b):
    """(equal, number of differing values, of which only the sign of a zero differs)"""
    a = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    b = np.ascontiguousarray(b, dtype=np.float32).view(np.uint32)
    if a.shape != b.shape:
        return False, max(a.size, b.size), 0
    diff = a != b
    zero_sign = diff & ((a | b) == 0x80000000)
    return not diff.any(), int(diff.sum()), int(zero_sign.sum())


def gguf_dequantize(raw, qtype):
    return np.asarray(gguf.quants.dequantize(raw, qtype), dtype=np.float32).reshape(-1)


def block_size(qtype):
    return gguf.GGML_QUANT_SIZES[qtype][0]


# ----------------------------------------------------------------------------------------------
# 1 and 2: random rows quantized by weir.

def check_random_rows(binary):
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        if not run_gtest(binary, "QuantOracleIo.DumpRandomRows", "WEIR_QUANT_DUMP", tmp):
            return summary
        names = sorted(f[:-len(".q.bin")] for f in os.listdir(tmp) if f.endswith(".q.bin"))
        check(len(names) > 0, f"weir dumped {len(names)} types: {' '.join(names)}")
        for name in names:
            qtype = QT[name]
            x = np.fromfile(os.path.join(tmp, name + ".in.f32"), dtype=np.float32)
            raw = np.fromfile(os.path.join(tmp, name + ".q.bin"), dtype=np.uint8)
            weir_y = np.fromfile(os.path.join(tmp, name + ".deq.f32"), dtype=np.float32)
            row = {"type": name, "values": x.size}

            ref_y = gguf_dequantize(raw, qtype)
            same, n_diff, n_zero = bits_equal(ref_y, weir_y)
            row["dequant"] = "bit-exact" if same else f"{n_diff} differ"
            check(same, f"{name}: gguf-py dequantizes weir's {raw.size} bytes to weir's "
                        f"{weir_y.size} values bit for bit"
                        + ("" if same else f" ({n_diff} differ, {n_zero} only in a zero's sign)"))

            try:
                ref_raw = np.asarray(gguf.quants.quantize(x, qtype)).reshape(-1).view(np.uint8)
            except NotImplementedError:
                row["quantizer"] = "gguf-py has none"
                print(f"note: {name}: gguf-py has no quantizer; weir's own is tested in C++")
                summary.append(row)
                continue
            ref_q_y = gguf_dequantize(ref_raw, qtype)
            bs = block_size(qtype)
            err_w = ((weir_y.astype(np.float64) - x) ** 2).reshape(-1, bs).mean(axis=1) ** 0.5
            err_r = ((ref_q_y.astype(np.float64) - x) ** 2).reshape(-1, bs).mean(axis=1) ** 0.5
            # weir no worse than gguf-py in every block; a block gguf-py gets exact, weir must too.
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(err_r > 0, err_w / err_r, np.where(err_w > 0, np.inf, 1.0))
            max_ratio = float(ratio.max())
            bytes_per_block = raw.size // (x.size // bs)
            same_blocks = int((raw.reshape(-1, bytes_per_block) ==
                               ref_raw.reshape(-1, bytes_per_block)).all(axis=1).sum())
            n_blocks = x.size // bs
            row["max_rms_ratio"] = max_ratio
            row["same_blocks"] = f"{same_blocks}/{n_blocks}"
            check(max_ratio <= 1.0 + 1e-12,
                  f"{name}: weir's per-block rms error <= gguf-py's (max ratio {max_ratio:.9g}, "
                  f"total rms weir {np.sqrt((err_w ** 2).mean()):.6g} "
                  f"gguf-py {np.sqrt((err_r ** 2).mean()):.6g})")
            print(f"note: {name}: {same_blocks}/{n_blocks} blocks byte-identical to gguf-py's")
            summary.append(row)
    return summary


# ----------------------------------------------------------------------------------------------
# 3: tensors of real GGUF files, dequantized by both.

def pick(tensors, k):
    if len(tensors) <= k:
        return tensors
    idx = sorted(set(round(i * (len(tensors) - 1) / (k - 1)) for i in range(k)))
    return [tensors[i] for i in idx]


def check_model_file(binary, path, type_names):
    label = os.path.basename(path)
    if not os.path.exists(path):
        skip(f"{path} absent")
        return []
    reader = gguf.GGUFReader(path)
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        slices = {}  # name -> [(tensor name, raw uint8 array)]
        for name in type_names:
            of_type = [t for t in reader.tensors if t.tensor_type.name == name]
            if not of_type:
                skip(f"{label}: no {name} tensors")
                continue
            parts = []
            for t in pick(of_type, TENSORS_PER_TYPE):
                data = np.asarray(t.data)
                rows = data.reshape(data.shape[0], -1) if data.ndim > 1 else data.reshape(1, -1)
                parts.append((t.name, np.ascontiguousarray(rows[:ROWS_PER_TENSOR]).reshape(-1)))
            slices[name] = parts
            np.concatenate([p for _, p in parts]).tofile(os.path.join(tmp, name + ".bin"))
        if not slices:
            return summary
        if not run_gtest(binary, "QuantOracleIo.DequantizeGivenBlocks", "WEIR_QUANT_IN", tmp):
            return summary
        for name, parts in slices.items():
            qtype = QT[name]
            weir_all = np.fromfile(os.path.join(tmp, name + ".out.f32"), dtype=np.float32)
            bs, ts = gguf.GGML_QUANT_SIZES[qtype]
            offset, n_values, all_same = 0, 0, True
            for tname, raw in parts:
                n = raw.size // ts * bs
                ref = gguf_dequantize(raw, qtype)
                same, n_diff, n_zero = bits_equal(ref, weir_all[offset:offset + n])
                all_same &= same
                check(same, f"{label} {tname} ({name}, {n} values): weir == gguf-py bit for bit"
                            + ("" if same else f" ({n_diff} differ, {n_zero} zero signs)"))
                offset += n
                n_values += n
            check(offset == weir_all.size, f"{label} {name}: weir wrote {weir_all.size} values, "
                                           f"expected {offset}")
            summary.append({"type": name, "file": label, "tensors": len(parts),
                            "values": n_values, "dequant": "bit-exact" if all_same else "DIFF"})
    return summary


def main():
    args = sys.argv[1:]
    shared = SHARED
    if len(args) == 3 and args[1] == "--shared":
        shared = args[2]
        args = args[:1]
    if len(args) != 1:
        print(__doc__)
        return 2
    binary = args[0]
    if not os.access(binary, os.X_OK):
        print(f"FAIL: {binary} is not an executable (build the weir_tensor_tests target)")
        return 1
    try:
        version = importlib.metadata.version("gguf")
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    print(f"gguf-py {version} from {os.path.dirname(gguf.__file__)}; numpy {np.__version__}")
    random_summary = check_random_rows(binary)
    model_summary = check_model_file(binary, os.path.join(shared, SMOLLM_REL), ["Q4_1", "Q8_0"])
    model_summary += check_model_file(binary, GEMMA, ["Q5_0", "Q4_K", "Q6_K", "Q8_0"])

    print("\nsummary: weir-quantized random rows")
    print(f"  {'type':6} {'dequant vs gguf-py':20} {'max rms ratio':>14} {'identical blocks':>17}")
    for r in random_summary:
        ratio = f"{r['max_rms_ratio']:.9g}" if "max_rms_ratio" in r else "-"
        same = r.get("same_blocks", r.get("quantizer", "-"))
        print(f"  {r['type']:6} {r['dequant']:20} {ratio:>14} {same:>17}")
    if model_summary:
        print("summary: tensors of GGUF files")
        for r in model_summary:
            print(f"  {r['type']:6} {r['dequant']:10} {r['tensors']} tensors, {r['values']} values "
                  f"({r['file']})")
    if skips:
        print(f"{len(skips)} input(s) skipped (see the 'skipped:' lines above)")
    print(f"\n{'FAILED: ' + str(len(failures)) + ' check(s)' if failures else 'all checks passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
