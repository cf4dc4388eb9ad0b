"""Kiln and ONNX Runtime on the models users bring: architectures written as ordinary PyTorch
modules (exports.py), exported by torch.onnx.export, the identical file run by both.

Usage: bench_exports.py --kiln PATH [--models M,...] [--opset N] [--quick] [--threads N]
                        [--rounds N] [--warmup N] [--out DIR] [--kiln-flags="..."]

For each model: exports.py writes model.onnx and its inputs; `kiln bench FILE --input ...`
compiles it once in a child process (weights compiled in as constants, Kiln's default for a
model file; a fresh kernel cache, so the compile is a cold one) and runs it; ONNX Runtime loads
the same file with all graph optimizations on. Before timing, ONNX Runtime's outputs are
checked against Kiln's: each within a relative error of 1e-3 of its largest magnitude. Where
Kiln's zoo builds the same architecture at the same sizes (ZOO_COUNTERPARTS), Kiln also runs
the zoo's graph, its parameters compiled in (--freeze), as a third system in the same turns:
what users bring should run as fast as what Kiln builds. Timing is bench_peers.py's: same
threads, warm-up, then rounds of turns, medians.

Writes DIR/exports.md and DIR/exports.json.
"""

import argparse
import gc
import json
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

import bench_peers
import exports

HERE = Path(__file__).resolve().parent
OUTPUT_RTOL = 1e-3
# The zoo preset and sizes that build each export's architecture. The BERTs have none (the
# zoo's carries a masked-LM head, the exports a pooler or nothing), nor the GCN (the zoo's
# adjacency is a sparse random graph, the export's dense).
ZOO_COUNTERPARTS = {
    "resnet-50": ["zoo:resnet-50", "--batch", "1"],
    "vit-b16": ["zoo:vit-base", "--batch", "1"],
    "xml-cnn": ["zoo:xml-cnn", "--batch", "8", "--seq-len", "500"],
}
ZOO = "Kiln, zoo's graph"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kiln", required=True, help="the kiln binary")
    parser.add_argument("--models", default=",".join(exports.MODELS),
                        help="comma-separated, of exports.py --list (default: all)")
    parser.add_argument("--opset", type=int, default=exports.DEFAULT_OPSET,
                        help="the export's opset (default %(default)s)")
    bench_peers.add_timing_arguments(parser)
    parser.add_argument("--out", default=str(HERE.parent / "results"),
                        help="directory for exports.md and exports.json (default: %(default)s)")
    parser.add_argument("--kiln-flags", default="",
                        help="more flags for kiln bench, for an ablation, given with '=' when "
                             "they start with a dash (--kiln-flags=--no-pack-weights)")
    args = parser.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    for model in args.models:
        if model not in exports.MODELS:
            parser.error(f"unknown model '{model}' (exports.py --list)")
    bench_peers.settle_timing_arguments(parser, args)
    return args


def ort_session(path, threads):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def check_outputs(session, feeds, kiln_outputs):
    """(ok, text): ONNX Runtime's outputs against Kiln's, by output name."""
    names = [o.name for o in session.get_outputs()]
    worst, worst_name = 0.0, ""
    for name, value in zip(names, session.run(None, feeds)):
        error = bench_peers.relative_error(value, kiln_outputs["output/" + name])
        if error >= worst:
            worst, worst_name = error, name
    ok = worst <= OUTPUT_RTOL
    return ok, f"outputs within {worst:.1e} of Kiln's ({worst_name}; allowed {OUTPUT_RTOL:.0e})"


def bench_model(args, model, work):
    print(f"== {model}: {exports.MODELS[model][0]}", flush=True)
    directory = work / model
    start = time.perf_counter()
    onnx_path, input_path = exports.export(model, directory, args.opset)
    print(f"   exported at opset {args.opset} in {time.perf_counter() - start:.1f} s "
          f"({onnx_path.stat().st_size / 2**20:.0f} MiB)", flush=True)
    result = {"model": model, "description": exports.MODELS[model][0], "systems": {}}
    kiln = bench_peers.KilnSession(args.kiln, model, "inference", args.threads, work,
                                   source=[str(onnx_path), "--input", str(input_path)]
                                   + args.kiln_flags.split())
    zoo = None
    try:
        if model in ZOO_COUNTERPARTS:
            zoo = bench_peers.KilnSession(
                args.kiln, model + "-zoo", "inference", args.threads, work,
                source=ZOO_COUNTERPARTS[model] + ["--inference", "--freeze"]
                + args.kiln_flags.split())
            result["systems"][ZOO] = {"compile_seconds": zoo.facts["compile seconds"],
                                      "preset": " ".join(ZOO_COUNTERPARTS[model]),
                                      "check": "not compared (other weights)", "ok": True}
        result["facts"] = kiln.facts
        print(f"   Kiln compiled {kiln.facts.get('kernels', '?')} kernels in "
              f"{kiln.facts['compile seconds']:.1f} s", flush=True)
        with np.load(kiln.npz) as archive:
            outputs = {n: archive[n] for n in archive.files if n.startswith("output/")}
        with np.load(input_path) as archive:
            feeds = {n: archive[n] for n in archive.files}
        result["systems"]["Kiln"] = {"compile_seconds": kiln.facts["compile seconds"],
                                     "check": "the reference", "ok": True}
        start = time.perf_counter()
        session = ort_session(onnx_path, args.threads)
        compile_seconds = time.perf_counter() - start
        ok, check = check_outputs(session, feeds, outputs)
        result["systems"]["ONNX Runtime"] = {"compile_seconds": compile_seconds, "check": check,
                                             "ok": ok}
        print(f"   ONNX Runtime: {'ok' if ok else 'CHECK FAILED'}: {check}", flush=True)
        runners = {"Kiln": kiln.run}
        if ok:
            runners["ONNX Runtime"] = bench_peers.timed(lambda: session.run(None, feeds))
        if zoo is not None:
            runners[ZOO] = zoo.run
        times = bench_peers.time_in_turns(runners, args.rounds, args.warmup)
        for name, seconds in times.items():
            entry = result["systems"][name]
            entry.update(seconds=seconds, median=statistics.median(seconds), min=min(seconds),
                         max=max(seconds))
            print(f"   {name}: median {entry['median'] * 1e3:.2f} ms over {len(seconds)} runs",
                  flush=True)
    finally:
        kiln.close()
        if zoo is not None:
            zoo.close()
        shutil.rmtree(directory, ignore_errors=True)
    return result


def markdown(results, machine, opset, kiln_flags):
    settings = (f"Kiln with `{kiln_flags}`" if kiln_flags
                else "weights compiled in as constants in both (Kiln's default for a model file)")
    lines = ["# Kiln and ONNX Runtime on PyTorch exports", "",
             "Architectures written as ordinary PyTorch modules (`bench/peers/exports.py`), "
             f"exported by `torch.onnx.export` at opset {opset}; Kiln and ONNX Runtime run the "
             "identical file (`make bench-peers`, `bench/peers/bench_exports.py`). Inference, "
             f"median ms per run (min-max); {settings}. Where Kiln's zoo builds the same "
             "architecture at the same sizes, Kiln also ran the zoo's graph (parameters "
             "compiled in, `--freeze`) in the same turns: the last column is its time over "
             "the export's (below 1: the export runs slower than Kiln's own graph).", "",
             "| model | Kiln | ONNX Runtime | Kiln's speedup | Kiln kernels | Kiln, zoo's graph "
             "| zoo / export |",
             "|---|---|---|---|---|---|---|"]
    speedups = []
    for r in results:
        kiln, ort = r["systems"]["Kiln"], r["systems"].get("ONNX Runtime", {})
        cell = lambda e: (f"{bench_peers.format_ms(e['median'])} "
                          f"({bench_peers.format_ms(e['min'])}-{bench_peers.format_ms(e['max'])})")
        if "median" in ort:
            speedup = ort["median"] / kiln["median"]
            speedups.append(speedup)
            ort_cell, speedup_cell = cell(ort), f"{speedup:.2f}x"
        else:
            ort_cell, speedup_cell = "check failed: " + ort.get("check", "not run"), ""
        zoo = r["systems"].get(ZOO, {})
        zoo_cells = (f"{cell(zoo)} | {zoo['median'] / kiln['median']:.2f}" if "median" in zoo
                     else "none in the zoo | ")
        lines.append(f"| {r['description']} | {cell(kiln)} | {ort_cell} | {speedup_cell} | "
                     f"{r['facts'].get('kernels', '?')} | {zoo_cells} |")
    lines.append(f"| **geometric mean** | | | **{bench_peers.geomean(speedups):.2f}x** | | | |")
    lines += ["", "Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()), ""]
    return "\n".join(lines)


def main():
    args = parse_args()
    import onnxruntime as ort
    import torch
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # the exporter's deprecation notices
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-exports-"))
    machine = bench_peers.machine_and_versions(args, torch, ort)
    machine["opset"] = args.opset
    machine["kiln flags"] = args.kiln_flags or "none"
    print("machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()), flush=True)
    results = []
    try:
        bench_peers.measure_device_profile(args.kiln, args.threads, work)
        for model in args.models:
            results.append(bench_model(args, model, work))
            gc.collect()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "exports.json").write_text(json.dumps({"machine": machine, "results": results},
                                                 indent=1))
    text = markdown(results, machine, args.opset, args.kiln_flags)
    (out / "exports.md").write_text(text)
    print(f"wrote {out / 'exports.md'}, exports.json\n{text}")
    return 0 if all(r["systems"]["ONNX Runtime"]["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
