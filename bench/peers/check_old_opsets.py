"""Old ONNX models in Kiln and in ONNX Runtime: the same small CNN written at opsets 7, 8, 9 and
10 (Conv, BatchNormalization with `spatial` at opset 7, PRelu, MaxPool, Flatten, Gemm with
transB, Add, Dropout; initializers listed among the graph inputs, as exporters of that time
wrote them). Kiln upgrades each to opset 11 with ONNX's version converter before importing it;
its outputs must match ONNX Runtime's within 1e-5 of their largest magnitude.

Usage: check_old_opsets.py --kiln PATH
Exits 1 when an opset's outputs differ (or Kiln fails), printing one line per opset.
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSETS = (7, 8, 9, 10)
RTOL = 1e-5


def old_cnn(opset, rng):
    """The model at `opset`, checked by ONNX's checker."""
    def weight(name, shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)

    variance = numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "var")
    initializers = [weight("w", (8, 3, 3, 3)), weight("cb", (8,)), weight("scale", (8,)),
                    weight("bias", (8,)), weight("mean", (8,)), variance,
                    weight("slope", (8, 1, 1)), weight("fw", (10, 8 * 4 * 4)), weight("fb", (10,))]
    batch_norm = {"epsilon": 1e-5, **({"spatial": 1} if opset == 7 else {})}
    nodes = [
        helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"],
                         **batch_norm),
        helper.make_node("PRelu", ["b", "slope"], ["p"]),
        helper.make_node("MaxPool", ["p"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["m"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["g"], transB=1),
        helper.make_node("Add", ["g", "fb"], ["y0"]),
        helper.make_node("Dropout", ["y0"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])]
    inputs += [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims))
               for t in initializers]
    graph = helper.make_graph(nodes, f"cnn_opset{opset}", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3 if opset <= 8 else 4
    onnx.checker.check_model(model)
    return model


def check(kiln, opset, workdir, rng):
    """One line saying how Kiln's output compares with ONNX Runtime's; whether it matched."""
    path = workdir / f"cnn_opset{opset}.onnx"
    onnx.save(old_cnn(opset, rng), str(path))
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    options = ort.SessionOptions()
    options.log_severity_level = 3  # initializers among the inputs are warned about
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    np.savez(workdir / "input.npz", x=x)
    run = subprocess.run([kiln, "run", str(path), "--input", str(workdir / "input.npz"),
                          "--output", str(workdir / "output.npz")],
                         capture_output=True, text=True)
    if run.returncode != 0:
        return f"opset {opset}: kiln failed: {run.stderr.strip()}", False
    got = np.load(workdir / "output.npz")["y"]
    error = float(np.abs(got - expected).max())
    scale = float(np.abs(expected).max())
    ok = error <= RTOL * scale
    upgraded = "upgraded" if "upgraded from opset" in run.stdout + run.stderr else "not upgraded"
    return (f"opset {opset}: {upgraded}, largest difference from ONNX Runtime {error:.2e} "
            f"(largest output {scale:.2f}): {'ok' if ok else 'MISMATCH'}"), ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kiln", required=True, help="the kiln binary")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    all_ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for opset in OPSETS:
            line, ok = check(args.kiln, opset, Path(tmp), rng)
            print(line)
            all_ok = all_ok and ok
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
