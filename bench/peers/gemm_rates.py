"""Gemm rates of Kiln and ONNX Runtime (MLAS) on the products of BERT and ViT layers: one-node
ONNX files (MatMul with its weight an initializer), and the same with bias and relu fused
after it, run by both with the same threads. Kiln runs each file twice, with its weights packed
once (its default) and with --no-pack-weights (oneDNN's sgemm repacking them on every call).

Usage: gemm_rates.py --kiln PATH [--threads N] [--runs N] [--rounds N] [--out DIR]
Writes DIR/gemm_rates.md: per shape, the median milliseconds and GFLOP/s of each (the median
over rounds of turns of each system's median of its runs).
"""

import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
# (rows, depth, columns): a batch of 8 sequences of 128 through BERT-base's feed-forward layer,
# ViT-B/16's 197 tokens through both of its feed-forward products, BERT-base at batch 1.
SHAPES = [(1024, 768, 3072), (197, 768, 3072), (197, 3072, 768), (128, 768, 3072)]


def model(rows, depth, columns, epilogue, rng):
    weight = numpy_helper.from_array(
        (rng.standard_normal((depth, columns)) / np.sqrt(depth)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(columns).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"])]
    if epilogue:
        nodes += [helper.make_node("Add", ["p", "b"], ["q"]),
                  helper.make_node("Relu", ["q"], ["y"])]
    graph = helper.make_graph(
        nodes, "gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, depth])],
        [helper.make_tensor_value_info("y" if epilogue else "p", TensorProto.FLOAT,
                                       [rows, columns])],
        [weight, bias] if epilogue else [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


def ort_ms(path, rows, depth, threads, runs, rng):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {"x": rng.standard_normal((rows, depth)).astype(np.float32)}
    for _ in range(3):
        session.run(None, feed)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def kiln_ms(kiln, path, threads, runs, flags):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([kiln, "run", str(path), "--repeat", str(runs), *flags],
                         capture_output=True, text=True, env=env, check=True).stdout
    return float(re.search(r"median ([0-9.]+) ms", out).group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kiln", required=True, help="the kiln binary")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--runs", type=int, default=20, help="timed runs per system and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of turns per file")
    parser.add_argument("--out", default=str(HERE.parent / "results"))
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    lines = ["| shape (m x k x n) | epilogue | MLAS ms | GFLOP/s | Kiln, repacked ms | GFLOP/s "
             "| Kiln, packed ms | GFLOP/s |", "|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for rows, depth, columns in SHAPES:
            for epilogue in (False, True):
                path = Path(tmp) / "gemm.onnx"
                onnx.save(model(rows, depth, columns, epilogue, rng), str(path))
                gflop = 2 * rows * depth * columns / 1e9
                # Rounds of turns, each system's median of its round medians: a burst of
                # load on a shared machine then moves one round, not the result.
                rounds = [[ort_ms(path, rows, depth, args.threads, args.runs, rng),
                           kiln_ms(args.kiln, path, args.threads, args.runs,
                                   ["--no-pack-weights"]),
                           kiln_ms(args.kiln, path, args.threads, args.runs, [])]
                          for _ in range(args.rounds)]
                times = [statistics.median(column) for column in zip(*rounds)]
                cells = " | ".join(f"{t:.2f} | {gflop / t * 1e3:.0f}" for t in times)
                line = (f"| {rows} x {depth} x {columns} | {'bias + relu' if epilogue else 'none'}"
                        f" | {cells} |")
                print(line, flush=True)
                lines.append(line)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    header = (f"Gemm rates on one-node ONNX files (`bench/peers/gemm_rates.py`), {args.threads} "
              f"threads, medians of {args.rounds} rounds of turns, each the median of "
              f"{args.runs} runs; onnxruntime {ort.__version__}. Kiln runs "
              "products of at most 512 rows by a constant weight with the weight packed once "
              "(\"packed\"; larger ones are never packed) unless --no-pack-weights "
              "(\"repacked\", by oneDNN's sgemm on every call).\n\n")
    (out / "gemm_rates.md").write_text(header + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
