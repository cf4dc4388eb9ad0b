#!/usr/bin/env python3
"""The host time a call into a Kiln graph costs under the torch.compile backend, beyond its
kernels: graphs of N inputs (N = 10 and 100 by default), each input a small tensor, whose one
kernel sums them, so that the kernel's time is small beside the call's. For each N it prints
the median time of a call to the compiled function, of the same sum run eagerly by PyTorch,
of the Kiln graph's program alone (CompiledGraph.run_addresses on addresses taken once), and
of the checked run (CompiledGraph.run, which converts each tensor by DLPack), and what a call
costs beyond the program, per call and per input.

Usage: backend_overhead.py [--inputs 10,100] [--elements 64] [--calls 2000] [--device cpu]
Run from the Python package's environment (.venv). Prints a Markdown table.
"""

import argparse
import statistics
import time

import torch

import kiln


def summed(*tensors):
    total = tensors[0]
    for t in tensors[1:]:
        total = total + t
    return total


def median_seconds(fn, calls: int, device: torch.device) -> float:
    """The median of `calls` timed calls of `fn`, after as many untimed ones."""
    for _ in range(calls):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(inputs: int, elements: int, calls: int, device: torch.device) -> dict:
    tensors = [torch.randn(elements, device=device) for _ in range(inputs)]
    report = kiln.Report()
    compiled = torch.compile(summed, backend=kiln.make_backend(report), dynamic=False)
    torch.testing.assert_close(compiled(*tensors), summed(*tensors))
    assert not report.fallbacks, report.fallbacks
    assert len(report.graphs) == 1, report.text()
    graph = report.graphs[0]
    outputs = [torch.empty(o.shape, dtype=o.dtype, device=device) for o in graph.outputs]
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    addresses = [t.data_ptr() for t in tensors]
    output_addresses = [t.data_ptr() for t in outputs]
    return {
        "inputs": inputs,
        "compiled": median_seconds(lambda: compiled(*tensors), calls, device),
        "eager": median_seconds(lambda: summed(*tensors), calls, device),
        "program": median_seconds(
            lambda: graph.compiled.run_addresses(addresses, output_addresses, stream), calls,
            device),
        "checked": median_seconds(lambda: graph.compiled.run(tensors, outputs, stream), calls,
                                  device),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", default="10,100", help="input counts, comma-separated")
    parser.add_argument("--elements", type=int, default=64, help="elements of each input")
    parser.add_argument("--calls", type=int, default=2000, help="timed calls (after as many)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda:N")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"Host time per call, {args.elements} f32 elements an input, median of {args.calls} "
          f"calls after {args.calls} untimed, on {device} (torch {torch.__version__})\n")
    print("| inputs | compiled call | eager sum | Kiln program alone | checked run (DLPack) "
          "| call beyond the program | per input |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for count in (int(n) for n in args.inputs.split(",")):
        m = measure(count, args.elements, args.calls, device)
        beyond = m["compiled"] - m["program"]
        print(f"| {count} | {m['compiled'] * 1e6:.1f} us | {m['eager'] * 1e6:.1f} us | "
              f"{m['program'] * 1e6:.1f} us | {m['checked'] * 1e6:.1f} us | "
              f"{beyond * 1e6:.1f} us | {beyond / count * 1e6:.2f} us |")


if __name__ == "__main__":
    main()
