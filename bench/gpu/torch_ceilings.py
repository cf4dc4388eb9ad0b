"""The GPU's two ceilings, measured through PyTorch: device-to-device copy bandwidth (bytes read
plus bytes written) and the matrix-product rate per precision (fp32, tf32, bf16, fp16). These
are the floors' denominators for `make bench-gpu` and the numbers a device profile must match.

    python3 bench/gpu/torch_ceilings.py [--json FILE]

Medians of CUDA-event timings after warm-up, on random data, rotating among input sets so that
the copies do not stay in L2.
"""
import argparse
import json
import statistics

import torch


def median_ms(fn, repeats=30, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth():
    n = 256 * 1024 * 1024  # 1 GiB of f32 per buffer, far above L2
    sources = [torch.randn(n, device="cuda") for _ in range(2)]
    target = torch.empty(n, device="cuda")
    turn = [0]

    def copy():
        turn[0] ^= 1
        target.copy_(sources[turn[0]])

    ms = median_ms(copy)
    return 2 * n * 4 / (ms * 1e-3) / 1e9


def matmul_rate(dtype, tf32, size=8192):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = [torch.randn(size, size, device="cuda", dtype=dtype) for _ in range(2)]
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    turn = [0]

    def product():
        turn[0] ^= 1
        torch.mm(a[turn[0]], b)

    ms = median_ms(product, repeats=10)
    return 2 * size**3 / (ms * 1e-3) / 1e12


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args()
    properties = torch.cuda.get_device_properties(0)
    result = {
        "gpu": properties.name,
        "multiprocessors": properties.multi_processor_count,
        "l2_bytes": getattr(properties, "L2_cache_size", None),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "copy_gb_per_s": copy_bandwidth(),
        "matmul_tflops": {
            "fp32": matmul_rate(torch.float32, False),
            "tf32": matmul_rate(torch.float32, True),
            "bf16": matmul_rate(torch.bfloat16, False),
            "fp16": matmul_rate(torch.float16, False),
        },
    }
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
