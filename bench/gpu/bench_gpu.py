"""Kiln's training steps on an NVIDIA GPU against PyTorch's, on the same models, weights and data.

Usage: bench_gpu.py --kiln PATH [--models M,...] [--peers eager,compile,compile-ro]
                    [--rounds N] [--warmup N] [--deadline-seconds S] [--out DIR]

For each zoo model, the training step (forward, backward and an Adam update) in float32:

- Kiln: `kiln zoo bench MODEL --train --device cuda` compiles the step once in a child process
  (a fresh kernel cache, so its compile time is a cold one), runs it, writes its inputs and
  outputs, and then times runs on request with the inputs and outputs left on the GPU (the
  program alone, as a training loop keeping its state on the GPU runs it).
- PyTorch eager, torch.compile (default mode) and torch.compile (mode="reduce-overhead", which
  replays CUDA graphs): tests/zoo/torch_zoo.py's independent implementation, its parameters and
  data on the GPU, torch.optim.Adam with Kiln's learning rate; compiled, the loss function and
  the optimizer step are compiled.

All systems compute in strict float32: TF32 is off for PyTorch's matmuls and convolutions, as
Kiln's cuBLASLt products compute in f32. Every system's first step is checked against PyTorch
eager's as bench/peers/bench_peers.py checks them (the loss within 1e-3, the gradient and
Adam's moments in relative norm, the updated parameters within 1e-3 lr of Adam applied to the
system's own gradient); one that fails is reported and not timed. After
the warm-up, the systems take turns in rounds, each run timed alone and synchronised; the table
gives medians with min and max. The floor is max(flops / the measured fp32 matmul rate, the
step's unavoidable bytes / the measured copy bandwidth), both measured here through PyTorch
(bench/gpu/torch_ceilings.py). Models left when --deadline-seconds has passed are not run.

Writes DIR/gpu.md (the table, the GPU and versions) and DIR/gpu.json (every measurement).
"""

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "peers"))
sys.path.insert(0, str(HERE.parent.parent / "tests" / "zoo"))

import bench_peers as peers  # noqa: E402  (the sessions, checks, turns and formatting)
import torch_ceilings  # noqa: E402

DEFAULT_MODELS = ["bert-base", "vit-base", "resnet-50", "xml-cnn", "gcn-cora"]
SYSTEMS = ["Kiln", "PyTorch eager", "torch.compile", "torch.compile (reduce-overhead)"]
PEER_FLAGS = {"eager": "PyTorch eager", "compile": "torch.compile",
              "compile-ro": "torch.compile (reduce-overhead)"}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kiln", required=True, help="the kiln binary")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help="comma-separated zoo presets (default: %(default)s)")
    parser.add_argument("--peers", default=",".join(PEER_FLAGS),
                        help="comma-separated: eager, compile, compile-ro (default: all)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up runs (default 3)")
    parser.add_argument("--deadline-seconds", type=float, default=float("inf"),
                        help="start no model after this many seconds")
    parser.add_argument("--out", default=str(HERE.parent / "results"),
                        help="directory for gpu.md and gpu.json (default: %(default)s)")
    args = parser.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    unknown = [p for p in args.peers.split(",") if p not in PEER_FLAGS]
    if unknown:
        parser.error(f"unknown peers {unknown} (eager, compile, compile-ro)")
    args.peers = [PEER_FLAGS[p] for p in args.peers.split(",")]
    args.threads = os.cpu_count()  # Kiln's host threads (its compile)
    if args.rounds < 1 or args.warmup < 1:
        parser.error("--rounds and --warmup must be positive")
    return args


def markdown(results, machine):
    lines = ["# Kiln's training steps on a GPU against PyTorch's", ""]
    lines.append("Machine: " + ", ".join(f"{k} {machine[k]}" for k in
                                          ("gpu", "torch", "cuda", "kiln", "date")) + ".")
    lines.append(f"Measured through PyTorch: copy bandwidth {machine['copy_gb_per_s']:.0f} GB/s, "
                 f"fp32 matmul {machine['fp32_tflops']:.1f} TFLOP/s. Strict fp32 (no TF32) for "
                 f"every system; {machine['warm-up runs']} warm-up runs, {machine['rounds']} "
                 "rounds of turns; medians (min - max).")
    lines.append("")
    lines.append("| model | system | median ms (min - max) | Kiln's speedup | x floor | "
                 "compile s | check |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for result in results:
        facts = result["facts"]
        floor = max(facts["graph flops"] / (machine["fp32_tflops"] * 1e12),
                    facts["graph io bytes"] / (machine["copy_gb_per_s"] * 1e9))
        kiln = result["systems"].get("Kiln", {}).get("median")
        for name in SYSTEMS:
            entry = result["systems"].get(name)
            if entry is None:
                continue
            if "median" not in entry:
                lines.append(f"| {result['model']} | {name} | not timed | | | "
                             f"{entry['compile_seconds']:.1f} | FAILED: {entry['check']} |")
                continue
            median = entry["median"]
            ratio = f"{median / kiln:.2f}x" if kiln and name != "Kiln" else ""
            lines.append(f"| {result['model']} | {name} | {peers.format_ms(median)} "
                         f"({peers.format_ms(entry['min'])} - {peers.format_ms(entry['max'])}) | "
                         f"{ratio} | {median / floor:.1f} | {entry['compile_seconds']:.1f} | "
                         f"{entry['check']} |")
    lines.append("")
    lines.append("Kiln's speedup: that system's median over Kiln's (above 1: Kiln is faster). "
                 "Kiln's kernels per step and where its gemms ran:")
    lines.append("")
    for result in results:
        facts = result["facts"]
        lines.append(f"- {result['model']}: {int(facts.get('kernels', 0))} kernels, "
                     f"{facts['graph flops'] / 1e9:.3g} GFLOP, runs on {facts.get('runs on', '?')}")
    lines.append("")
    lines.append("Geometric mean of Kiln's speedup over each system (models where both were "
                 "timed):")
    lines.append("")
    for peer in SYSTEMS[1:]:
        ratios = [r["systems"][peer]["median"] / r["systems"]["Kiln"]["median"] for r in results
                  if "median" in r["systems"].get(peer, {})
                  and "median" in r["systems"].get("Kiln", {})]
        if ratios:
            lines.append(f"- over {peer}: {peers.geomean(ratios):.2f}x ({len(ratios)} models)")
    return "\n".join(lines) + "\n"


def main():
    args = parse_args()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-gpu-"))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor-cache")
    import torch
    import torch_zoo
    if not torch.cuda.is_available():
        sys.exit("bench_gpu.py: PyTorch sees no GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    warnings.simplefilter("ignore", UserWarning)
    for model in args.models:
        if model not in torch_zoo.PRESETS:
            sys.exit(f"bench_gpu.py: no PyTorch implementation of '{model}'")
    machine = {
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "kiln": subprocess.run([args.kiln, "--version"], capture_output=True,
                               text=True).stdout.strip(),
        "date": time.strftime("%Y-%m-%d %H:%M"), "rounds": args.rounds,
        "warm-up runs": args.warmup,
        "copy_gb_per_s": torch_ceilings.copy_bandwidth(),
        "fp32_tflops": torch_ceilings.matmul_rate(torch.float32, False),
    }
    torch.backends.cuda.matmul.allow_tf32 = False  # matmul_rate sets it
    print("machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()), flush=True)
    results = []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        for model in args.models:
            if time.monotonic() - started > args.deadline_seconds:
                print(f"== {model}: not run (past --deadline-seconds)", flush=True)
                continue
            try:
                results.append(peers.bench_one(args, torch, torch_zoo, model, "train", work,
                                               names=args.peers, device="cuda"))
            except RuntimeError as error:  # Kiln could not compile or run it: said, and on
                print(f"   {model}: {error}", flush=True)
                results.append({"model": model, "mode": "train", "facts": {},
                                "systems": {"Kiln": {"compile_seconds": 0, "ok": False,
                                                     "check": str(error).splitlines()[0]}}})
            torch._dynamo.reset()
            gc.collect()
            torch.cuda.empty_cache()
            # Written after every model, so that a run cut short keeps what it measured.
            timed = [r for r in results if r["facts"]]
            (out / "gpu.json").write_text(json.dumps({"machine": machine, "results": results},
                                                     indent=1))
            (out / "gpu.md").write_text(markdown(timed, machine))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(markdown([r for r in results if r["facts"]], machine))
    return peers.exit_status(results)


if __name__ == "__main__":
    sys.exit(main())
