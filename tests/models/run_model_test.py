#!/usr/bin/env python3
"""One model-level test of Kiln's ONNX importer against PyTorch.

    run_model_test.py KILN MODEL FIXTURE_ROOT [--tolerance 1e-4]

Makes (or reuses) the fixture FIXTURE_ROOT/MODEL with make_fixture.py, runs
`KILN run model.onnx --input input.npz --output kiln.npz` (Kiln's f64 reference interpreter) and
compares each output with PyTorch's (a fixture of exporter patterns also lists the canonical
rules that must be recognized, checked in kiln run's report, and runs with --check, every
compiled kernel against the reference interpreter):

    error = max |kiln - torch| / max |torch|      (per output, over all its elements)

where torch is PyTorch's own float32 forward pass. The test passes when every output's error is
at most the tolerance (1e-4). It also prints each output's error against PyTorch run in float64
on the same weights and inputs (the exact answer), and PyTorch float32's own error against it:
the noise floor any float32 implementation sits on.

A fixture is reused when its stamp (a hash of make_fixture.py and the torch version) matches;
otherwise it is rebuilt. Exits 77 (the test's SKIP_RETURN_CODE) when the Python running it
lacks torch, torchvision or numpy.
"""

import argparse
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_FIXTURE = os.path.join(HERE, "make_fixture.py")


def package_version(name):
    """The installed version, from package metadata (importing torch would take seconds)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return importlib.import_module(name).__version__


def fixture_stamp():
    digest = hashlib.sha256()
    with open(MAKE_FIXTURE, "rb") as f:
        digest.update(f.read())
    for name in ("torch", "torchvision", "numpy"):
        digest.update(f"{name} {package_version(name)}\n".encode())
    return digest.hexdigest()


def ensure_fixture(model, outdir):
    stamp_path = os.path.join(outdir, "stamp")
    stamp = fixture_stamp()
    try:
        with open(stamp_path) as f:
            if f.read().strip() == stamp:
                print(f"fixture {outdir}: up to date")
                return
    except OSError:
        pass
    shutil.rmtree(outdir, ignore_errors=True)
    start = time.monotonic()
    subprocess.run([sys.executable, MAKE_FIXTURE, model, outdir], check=True,
                   stdout=subprocess.DEVNULL)
    print(f"fixture {outdir}: made in {time.monotonic() - start:.1f} s")
    # Written last: an interrupted run leaves no stamp and is redone.
    with open(stamp_path, "w") as f:
        f.write(stamp + "\n")


def relative_error(actual, expected):
    import numpy as np
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    diff = float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64)))) \
        if expected.size else 0.0
    return diff / scale if scale > 0 else diff


def recognized_all(families, kiln_output):
    """Whether `kiln run` recognized every canonical rule family listed (a fixture of exporter
    patterns lists them): its "recognized (canonical rules):" line names each rule applied,
    one rule per family, over every dtype and rank it lists."""
    line = next((l for l in kiln_output.splitlines() if l.startswith("recognized")), "")
    missing = [f for f in families if not re.search(rf"[ :,]{re.escape(f)} x\d", line)]
    if missing:
        print(f"  not recognized: {', '.join(missing)}")
    elif families:
        print(f"  recognized every rule family the fixture lists ({len(families)})")
    return not missing


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kiln")
    parser.add_argument("model")
    parser.add_argument("fixture_root")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    # make_fixture.py needs torch and torchvision; without them the test is skipped. They are
    # looked up, not imported: importing torch takes seconds and a cached fixture needs none.
    missing = [m for m in ("numpy", "torch", "torchvision") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"SKIP: no {', '.join(missing)} in {sys.executable} "
              "(install python3-torch python3-torchvision python3-numpy)")
        return SKIP
    import numpy as np

    outdir = os.path.join(args.fixture_root, args.model)
    ensure_fixture(args.model, outdir)
    with open(os.path.join(outdir, "fixture.json")) as f:
        info = json.load(f)
    inputs = np.load(os.path.join(outdir, "input.npz"))
    expected = dict(np.load(os.path.join(outdir, "expected.npz")))
    reference = dict(np.load(os.path.join(outdir, "reference64.npz")))

    result = os.path.join(outdir, "kiln.npz")
    if os.path.exists(result):
        os.remove(result)
    command = [args.kiln, "run", os.path.join(outdir, "model.onnx"),
               "--input", os.path.join(outdir, "input.npz"), "--output", result]
    # Static shapes for inputs the export left symbolic (the same shapes the model declares
    # otherwise, which Kiln accepts).
    for name in inputs.files:
        command += ["--shape", f"{name}={'x'.join(str(d) for d in inputs[name].shape)}"]
    # A fixture of exporter patterns is small: every compiled kernel is also checked against
    # the reference interpreter on the exporter's own graph, rewritten.
    if info.get("recognized"):
        command.append("--check")
    print("$ " + " ".join(command), flush=True)
    start = time.monotonic()
    completed = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    kiln_seconds = time.monotonic() - start
    print(completed.stdout, end="")
    print(f"kiln run: {kiln_seconds:.1f} s (PyTorch f32 forward: "
          f"{info['torch_forward_seconds']} s)")
    if completed.returncode != 0:
        print(f"FAIL: kiln run exited with {completed.returncode}")
        return 1
    actual = dict(np.load(result))

    ok = recognized_all(info.get("recognized", []), completed.stdout)
    print(f"error = max|a - b| / max|b| per output; tolerance {args.tolerance:g}")
    for name, want in expected.items():
        if name not in actual:
            print(f"  {name}: missing from Kiln's outputs")
            ok = False
            continue
        got = actual[name]
        if got.shape != want.shape or got.dtype != want.dtype:
            print(f"  {name}: Kiln gives {got.dtype}{list(got.shape)}, "
                  f"PyTorch {want.dtype}{list(want.shape)}")
            ok = False
            continue
        error = relative_error(got, want)
        error64 = relative_error(got, reference[name])
        torch_error64 = relative_error(want, reference[name])
        verdict = "ok" if error <= args.tolerance else "MISMATCH"
        print(f"  {name} {want.dtype}{list(want.shape)}: kiln vs torch f32 {error:.3g} ({verdict}); "
              f"kiln vs torch f64 {error64:.3g}; torch f32 vs torch f64 {torch_error64:.3g}")
        ok = ok and error <= args.tolerance
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
