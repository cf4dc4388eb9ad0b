"""Kiln against the systems users would pick instead, on the same models, inputs and threads.

Usage: bench_peers.py --kiln PATH [--models M,...] [--modes inference,train] [--quick]
                      [--threads N] [--rounds N] [--warmup N] [--out DIR]

For each zoo model and mode (inference; training step = forward, backward and Adam update):

- Kiln: `kiln zoo bench` compiles the model's graph once in a child process (with a fresh
  kernel cache, so its compile time is a cold one), runs it, and writes its inputs and outputs;
  it then times runs on request, so its runs take turns with the peers' in this process.
- ONNX Runtime (inference): the model as `kiln zoo export` writes it (parameters as
  initializers), all graph optimizations on.
- PyTorch eager and torch.compile (Inductor, default mode, fresh cache): the independent
  implementation in tests/zoo/torch_zoo.py, fed Kiln's own inputs and weights. The training
  step is torch.optim.Adam's, with Kiln's learning rate; under torch.compile the loss function
  and the optimizer step are compiled.

Before any timing, every system's output is checked against Kiln's: the logits within a
relative error of 1e-3 (of the largest logit); for the training step the loss within 1e-3 and
the updated parameters, whose first Adam update is about +-lr per element, within 0.1 lr on all
but max(1e-3, twice the share by which eager and torch.compile differ from each other) of the
elements, and on all but a tenth of any one tensor. Adam's first step turns a
gradient's sign into a whole step, so an element whose gradient is rounding noise (below 1e-6
of the model's largest, in torch's gradient; an attention key bias's gradient is mathematically
zero) may step either way: those elements are left out. So may one whose f32 gradient is a sum
that nearly cancels (a batch norm bias over 25,088 positions), hence the allowances. A system
that fails its check is reported and not timed.

Timing: all systems use the same thread count. After a warm-up, the systems take turns in
rounds (their order rotating), each turn running as many runs as fill about a quarter second,
after a 0.2 s pause in which the previous system's threads stop spinning; each run is timed
alone. The tables give medians with min and max; compile times are apart.
The roofline floor of a model is max(flops / measured matmul peak, unavoidable bytes / measured
copy bandwidth), from Kiln's device profile of this machine; unavoidable bytes are each graph
input read once and each output written once.

Writes DIR/peers.md (the tables, machine and versions), DIR/peers.json (every measurement) and
DIR/peers.png (speedup over PyTorch eager, one bar per system).
"""

import argparse
import gc
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests" / "zoo"))

DEFAULT_MODELS = ["bert-base", "vit-base", "resnet-50", "xml-cnn", "gcn-cora"]
MODES = ["inference", "train"]
SYSTEMS = ["Kiln", "ONNX Runtime", "PyTorch eager", "torch.compile"]
LOGIT_RTOL = 1e-3
LOSS_RTOL = 1e-3
UPDATE_TOL = 0.1          # of the learning rate
UPDATE_OUTLIERS = 1e-3    # fraction of all elements allowed beyond UPDATE_TOL
UPDATE_OUTLIERS_PER_TENSOR = 0.1  # the same, in any one parameter tensor
NOISE_GRADIENT = 1e-6     # of the largest gradient: below it, a gradient is rounding noise
TURN_SECONDS = 0.25
SETTLE_SECONDS = 0.2


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kiln", required=True, help="the kiln binary")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help="comma-separated zoo presets (default: %(default)s)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="comma-separated: inference, train (default: both)")
    add_timing_arguments(parser)
    parser.add_argument("--out", default=str(HERE.parent / "results"),
                        help="directory for peers.md, peers.json, peers.png (default: %(default)s)")
    args = parser.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    args.modes = [m for m in args.modes.split(",") if m]
    for mode in args.modes:
        if mode not in MODES:
            parser.error(f"unknown mode '{mode}' (inference or train)")
    settle_timing_arguments(parser, args)
    return args


def add_timing_arguments(parser):
    """--quick, --threads, --rounds and --warmup (bench_exports.py takes them too)."""
    parser.add_argument("--quick", action="store_true",
                        help="fewer rounds and warm-up runs (3 and 1), for a short look")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="threads for every system (default: all cores, %(default)s)")
    parser.add_argument("--rounds", type=int, help="timed rounds (default 7, --quick 3)")
    parser.add_argument("--warmup", type=int, help="warm-up runs per system (default 2, --quick 1)")


def settle_timing_arguments(parser, args):
    """The defaults of --rounds and --warmup, by --quick; an error for values out of range."""
    if args.rounds is None:
        args.rounds = 3 if args.quick else 7
    if args.warmup is None:
        args.warmup = 1 if args.quick else 2
    if args.threads < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--threads and --rounds must be positive, --warmup not negative")


class KilnSession:
    """A `kiln zoo bench` child process: compiled once, timed on request. On a GPU
    (device="cuda", bench/gpu), its runs leave their inputs and outputs on the device.
    `source`, when given, replaces the preset: the arguments naming a model file and its inputs
    (`kiln bench FILE --input ...`, bench_exports.py)."""

    def __init__(self, kiln, model, mode, threads, work, device="cpu", source=None):
        self.npz = work / f"{model}-{mode}.npz"
        # A cache with no kernels, so that the compile is a cold one; on the CPU, with the run's
        # device profile.
        cache = work / f"kiln-cache-{model}-{mode}"
        if device == "cpu":
            shutil.copytree(work / "kiln-cache" / "device", cache / "device")
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), KILN_CACHE_DIR=str(cache))
        command = [kiln, "zoo", "bench", model, "--inference" if mode == "inference" else "--train"]
        if source is not None:
            command = [kiln, "bench"] + source
        command += ["--device", device, "-o", str(self.npz)]
        self.stderr = open(work / f"kiln-{model}-{mode}.stderr", "w+")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.stderr, text=True, env=env)
        self.facts = {}
        self.log = []
        for line in self._lines_until("ready"):
            self.log.append(line)
            for key in ("graph flops", "graph io bytes", "device matmul flops",
                        "device bandwidth", "compile seconds"):
                if line.startswith(key + " "):
                    self.facts[key] = float(line[len(key) + 1:])
            if line.startswith("fusion "):
                self.facts["kernels"] = int(line.split(" in ")[1].split()[0])
            if line.startswith("runs on "):
                self.facts["runs on"] = line[len("runs on "):]

    def _fail(self, what):
        self.stderr.seek(0)
        raise RuntimeError(f"kiln zoo bench {what}:\n" + "\n".join(self.log) + self.stderr.read())

    def _lines_until(self, last):
        while True:
            line = self.process.stdout.readline()
            if not line:
                self._fail("ended early")
            line = line.rstrip("\n")
            if line == last:
                return
            yield line

    def run(self, count):
        self.process.stdin.write(f"{count}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line.startswith("seconds "):
            self._fail(f"answered '{line.strip()}'")
        return [float(t) for t in line.split()[1:]]

    def close(self):
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait()
        self.stderr.close()


def measure_device_profile(kiln, threads, work):
    """Has Kiln measure this machine once (its device profile, under work/kiln-cache), so that
    every model is partitioned, and its floor computed, with the same peaks. Kiln writes a
    profile only when the machine is quiet (its load average below half the cores), so this
    waits, up to three minutes, for the load a build or an install leaves behind to fall."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), KILN_CACHE_DIR=str(work / "kiln-cache"))
    device = work / "kiln-cache" / "device"
    for _ in range(18):
        subprocess.run([kiln, "zoo", "explain", "mlp-tiny"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        if any(device.glob("*.json")):
            return
        time.sleep(10)
    sys.exit(f"bench_peers: the machine stayed busy (load average {os.getloadavg()[0]:.1f}), "
             "and Kiln measures its device profile only on a quiet machine")


def timed(fn, wait=lambda: None):
    """A function of a run count that returns each run's seconds, each run's work waited for
    (`wait`: a GPU's synchronisation)."""
    def run(count):
        seconds = []
        for _ in range(count):
            start = time.perf_counter()
            fn()
            wait()
            seconds.append(time.perf_counter() - start)
        return seconds
    return run


def relative_error(value, reference):
    reference = np.asarray(reference, dtype=np.float64)
    scale = max(float(np.abs(reference).max()), 1e-30)
    return float(np.abs(np.asarray(value, dtype=np.float64) - reference).max() / scale)


def torch_inputs(torch, torch_zoo, inputs, names):
    tensors = {name: torch.from_numpy(np.ascontiguousarray(inputs[name])) for name in names}
    return tensors


def split_inputs(torch_zoo, inputs):
    data = {n for n in inputs if n in torch_zoo.DATA}
    return data, [n for n in inputs if n not in data]


def check_logits(name, logits, expected):
    error = relative_error(logits, expected)
    ok = error <= LOGIT_RTOL
    return ok, f"logits rel. error {error:.1e}" + ("" if ok else f" > {LOGIT_RTOL}")


def dense_adjacency(inputs):
    """GCN's adjacency as a dense matrix from its CSR arrays: ONNX has no sparse product, so
    Kiln's exported GCN takes it dense."""
    row_ptr = inputs["adjacency.row_ptr"]
    nodes = row_ptr.shape[0] - 1
    dense = np.zeros((nodes, nodes), dtype=inputs["adjacency.values"].dtype)
    rows = np.repeat(np.arange(nodes), np.diff(row_ptr))
    np.add.at(dense, (rows, inputs["adjacency.col_indices"]), inputs["adjacency.values"])
    return dense


def inference_systems(args, torch, torch_zoo, model, inputs, expected, work):
    """(name, compile seconds, check, run) for ONNX Runtime, PyTorch eager and torch.compile."""
    import onnxruntime as ort
    systems = []
    data_names, parameter_names = split_inputs(torch_zoo, inputs)

    onnx_file = work / f"{model}.onnx"
    subprocess.run([args.kiln, "zoo", "export", model, "-o", str(onnx_file)], check=True,
                   stdout=subprocess.DEVNULL)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    start = time.perf_counter()
    session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
    compile_seconds = time.perf_counter() - start
    feeds = {i.name: dense_adjacency(inputs) if i.name == "adjacency"
             else np.ascontiguousarray(inputs[i.name]) for i in session.get_inputs()}
    logits = session.run(None, feeds)[0]
    systems.append(("ONNX Runtime", compile_seconds, check_logits("ort", logits, expected),
                    timed(lambda: session.run(None, feeds))))

    params = torch_inputs(torch, torch_zoo, inputs, parameter_names)
    data = torch_inputs(torch, torch_zoo, inputs, data_names)
    if "adjacency.row_ptr" in data:  # built once, as a GCN user would
        data["adjacency"] = torch_zoo.adjacency_matrix(data)

    def forward(p, d):
        return torch_zoo.forward(model, p, d, training=False)[1]

    for name, fn in (("PyTorch eager", forward), ("torch.compile", torch.compile(forward))):
        def run(fn=fn):
            with torch.inference_mode():
                return fn(params, data)
        start = time.perf_counter()
        logits = run()
        compile_seconds = time.perf_counter() - start if name == "torch.compile" else 0.0
        systems.append((name, compile_seconds, check_logits(name, logits.numpy(), expected),
                        timed(run)))
    return systems


def update_disagreement(trainable, updated_a, updated_b, gradients, lr):
    """How often two first Adam steps differ by more than UPDATE_TOL * lr: over all elements
    and in the worst tensor (with its name). Elements whose gradient (`gradients`, torch's) is
    rounding noise, below NOISE_GRADIENT of the largest, are left out: a gradient that is
    mathematically zero (an attention key bias's) steps by the sign of its noise."""
    largest_gradient = max(float(np.abs(g).max()) for g in gradients.values())
    worst, worst_name, beyond_count, meaningful_count = 0.0, "", 0, 0
    for n in trainable:
        meaningful = np.abs(gradients[n]) >= NOISE_GRADIENT * largest_gradient
        if not meaningful.any():
            continue
        difference = updated_a[n].astype(np.float64) - updated_b[n].astype(np.float64)
        beyond = (np.abs(difference) > UPDATE_TOL * lr)[meaningful]
        beyond_count += int(beyond.sum())
        meaningful_count += int(beyond.size)
        if float(beyond.mean()) > worst:
            worst, worst_name = float(beyond.mean()), n
    return beyond_count / max(meaningful_count, 1), worst, worst_name


TRAINING_PEERS = ("PyTorch eager", "torch.compile")


def training_systems(torch, torch_zoo, model, inputs, outputs, names=TRAINING_PEERS,
                     device="cpu"):
    """(name, compile seconds, check, run) for each of the PyTorch systems `names` (PyTorch
    eager, torch.compile, torch.compile (reduce-overhead)) on `device`; one that cannot run the
    model is reported, and not timed."""
    trainable = [n[len("output/"):-len(".next")] for n in outputs if n.endswith(".next")]
    data_names, _ = split_inputs(torch_zoo, inputs)
    host_data = torch_inputs(torch, torch_zoo, inputs, data_names)
    data = {n: t.to(device) for n, t in host_data.items()}
    if "adjacency.row_ptr" in host_data:  # built once, on the host, as a GCN user would
        data["adjacency"] = torch_zoo.adjacency_matrix(host_data).to(device)
    wait = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    lr = float(inputs["lr"])
    if float(inputs["step"]) != 1:
        raise RuntimeError("kiln's step is not a first Adam step")
    loss_name = next(n for n in outputs if not n.endswith(".next"))
    expected_loss = float(outputs[loss_name])
    kiln_updated = {n: outputs[f"output/{n}.next"] for n in trainable}
    steps, systems = {}, []
    for name in names:
        params = {n: torch.from_numpy(np.array(inputs[n])).to(device).requires_grad_()
                  for n in trainable}
        optimizer = torch.optim.Adam(list(params.values()), lr=lr, betas=(0.9, 0.999), eps=1e-8)

        def loss_fn(params=params):
            return torch_zoo.forward(model, params, data, training=True)[0]

        optimizer_step = optimizer.step
        if name != "PyTorch eager":
            mode = "reduce-overhead" if "reduce-overhead" in name else "default"
            loss_fn = torch.compile(loss_fn, mode=mode)
            optimizer_step = torch.compile(optimizer.step, mode=mode)

        def step(loss_fn=loss_fn, optimizer=optimizer, optimizer_step=optimizer_step):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn()
            loss.backward()
            optimizer_step()
            return loss

        start = time.perf_counter()
        try:
            loss = float(step())
        except Exception as error:  # pylint: disable=broad-except
            why = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
            systems.append((name, 0.0, (False, f"did not run: {why}"), None))
            continue
        compile_seconds = time.perf_counter() - start if name != "PyTorch eager" else 0.0
        updated = {n: p.detach().cpu().numpy().copy() for n, p in params.items()}
        gradients = {n: p.grad.detach().cpu().numpy().copy() for n, p in params.items()}
        steps[name] = (step, compile_seconds, loss, updated, gradients)
    # The first two PyTorch systems' disagreement (eager and torch.compile) is the f32 noise
    # floor of this comparison: Kiln may differ from each by up to twice as much (and by
    # UPDATE_OUTLIERS in any case).
    ran = list(steps)
    noise = 0.0
    if len(ran) >= 2:
        noise, _, _ = update_disagreement(trainable, steps[ran[0]][3], steps[ran[1]][3],
                                          steps[ran[0]][4], lr)
    allowed = max(UPDATE_OUTLIERS, 2 * noise)
    for name, (step, compile_seconds, loss, updated, gradients) in steps.items():
        loss_error = abs(loss - expected_loss) / max(abs(expected_loss), 1e-30)
        fraction, worst, worst_name = update_disagreement(trainable, kiln_updated, updated,
                                                          gradients, lr)
        ok = (loss_error <= LOSS_RTOL and fraction <= allowed
              and worst <= UPDATE_OUTLIERS_PER_TENSOR)
        text = (f"loss rel. error {loss_error:.1e}; updates beyond 0.1 lr: {fraction:.1e} of "
                f"all (allowed {allowed:.1e}; {ran[0]} vs {ran[-1]} {noise:.1e}), {worst:.1e} at "
                f"most in one tensor" + (f" ({worst_name})" if worst_name else ""))
        systems.append((name, compile_seconds, (ok, text), timed(step, wait)))
    del steps
    return systems


def time_in_turns(runners, rounds, warmup):
    """Each runner's per-run seconds: warm-up, then `rounds` rounds of turns."""
    per_turn = {}
    for name, run in runners.items():
        warm = run(max(warmup, 1))
        per_turn[name] = max(1, min(50, int(TURN_SECONDS / max(min(warm), 1e-6))))
    times = {name: [] for name in runners}
    names = list(runners)
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            # A pause between turns lets the last system's worker threads stop spinning (ONNX
            # Runtime's pool and OpenMP's spin after their work) before the next one's runs.
            time.sleep(SETTLE_SECONDS)
            times[name] += runners[name](per_turn[name])
    return times


def bench_one(args, torch, torch_zoo, model, mode, work, names=TRAINING_PEERS, device="cpu"):
    """Kiln and its peers on one model and mode: the training step's peers are `names`, on
    `device` (bench/gpu's); inference is on the CPU."""
    print(f"== {model} {mode}", flush=True)
    result = {"model": model, "mode": mode, "systems": {}}
    kiln = KilnSession(args.kiln, model, mode, args.threads, work, device=device)
    try:
        facts = kiln.facts
        result["facts"] = facts
        print(f"   Kiln compiled {facts.get('kernels', '?')} kernels in "
              f"{facts['compile seconds']:.1f} s"
              + (f"; runs on {facts['runs on']}" if "runs on" in facts else ""), flush=True)
        with np.load(kiln.npz) as archive:
            inputs = {n: archive[n] for n in archive.files if not n.startswith("output/")}
            outputs = {n: archive[n] for n in archive.files if n.startswith("output/")}
        result["systems"]["Kiln"] = {"compile_seconds": facts["compile seconds"],
                                     "check": "the reference for the others", "ok": True}
        if mode == "inference":
            expected = next(iter(outputs.values()))
            peers = inference_systems(args, torch, torch_zoo, model, inputs, expected, work)
        else:
            peers = training_systems(torch, torch_zoo, model, inputs, outputs, names, device)
        del inputs, outputs
        gc.collect()
        runners = {"Kiln": kiln.run}
        for name, compile_seconds, (ok, check), run in peers:
            result["systems"][name] = {"compile_seconds": compile_seconds, "check": check, "ok": ok}
            print(f"   {name}: {'ok' if ok else 'CHECK FAILED'}: {check}"
                  + (f"; compiled in {compile_seconds:.1f} s" if compile_seconds else ""),
                  flush=True)
            if ok:
                runners[name] = run
        times = time_in_turns(runners, args.rounds, args.warmup)
        for name, seconds in times.items():
            entry = result["systems"][name]
            entry["seconds"] = seconds
            entry["median"] = statistics.median(seconds)
            entry["min"], entry["max"] = min(seconds), max(seconds)
            print(f"   {name}: median {entry['median'] * 1e3:.2f} ms over {len(seconds)} runs",
                  flush=True)
    finally:
        kiln.close()
        if kiln.npz.exists():
            kiln.npz.unlink()
    return result


def machine_and_versions(args, torch, ort):
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f"{kib / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    def command_output(command):
        try:
            return subprocess.run(command, capture_output=True, text=True,
                                  check=True).stdout.strip().splitlines()[0]
        except (OSError, subprocess.CalledProcessError, IndexError):
            return "unknown"
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory": memory, "threads": args.threads,
        "os": platform.platform(), "python": platform.python_version(),
        "kiln": command_output([args.kiln, "--version"]),
        "kiln commit": command_output(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"]),
        "g++": command_output(["g++", "--version"]),
        "torch": torch.__version__, "onnxruntime": ort.__version__, "numpy": np.__version__,
        "rounds": args.rounds, "warm-up runs": args.warmup,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def roofline_seconds(facts):
    return max(facts["graph flops"] / facts["device matmul flops"],
               facts["graph io bytes"] / facts["device bandwidth"])


def format_ms(seconds):
    ms = seconds * 1e3
    return f"{ms:.3g}" if ms < 100 else f"{ms:,.0f}"


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def markdown(results, machine):
    lines = ["# Kiln against its peers", ""]
    lines.append("Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()
                                          if k in ("cpu", "cores", "memory", "os")) + ".")
    lines.append("Versions: " + ", ".join(f"{k} {machine[k]}" for k in
                                          ("kiln", "kiln commit", "g++", "torch", "onnxruntime",
                                           "numpy", "python")) + ".")
    lines.append(f"Settings: {machine['threads']} threads for every system, "
                 f"{machine['warm-up runs']} warm-up runs, {machine['rounds']} rounds of "
                 f"interleaved turns; medians (min - max) of single runs; run {machine['date']}.")
    lines.append("Each model at its zoo preset's default size (`kiln zoo` lists them); the "
                 "training step is forward, backward and an Adam update.")
    lines.append("")
    lines.append("| model | mode | system | median ms (min - max) | vs eager | Kiln's speedup | "
                 "x floor | compile s | check |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for result in results:
        systems = result["systems"]
        floor = roofline_seconds(result["facts"])
        eager = systems.get("PyTorch eager", {}).get("median")
        kiln = systems.get("Kiln", {}).get("median")
        for name in SYSTEMS:
            entry = systems.get(name)
            if entry is None:
                continue
            if "median" not in entry:
                lines.append(f"| {result['model']} | {result['mode']} | {name} | not timed | | | "
                             f"| {entry['compile_seconds']:.1f} | FAILED: {entry['check']} |")
                continue
            median = entry["median"]
            vs_eager = f"{eager / median:.2f}x" if eager else ""
            kiln_ratio = f"{median / kiln:.2f}x" if kiln and name != "Kiln" else ""
            lines.append(
                f"| {result['model']} | {result['mode']} | {name} | {format_ms(median)} "
                f"({format_ms(entry['min'])} - {format_ms(entry['max'])}) | {vs_eager} | "
                f"{kiln_ratio} | {median / floor:.1f} | {entry['compile_seconds']:.1f} | "
                f"{entry['check']} |")
    lines.append("")
    lines.append("Kiln's speedup: that system's median over Kiln's (above 1: Kiln is faster). "
                 "x floor: the median over the roofline floor, max(flops / peak, bytes / "
                 "bandwidth):")
    lines.append("")
    lines.append("| model | mode | kernels | GFLOP | unavoidable MB | floor ms | bound by |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for result in results:
        f = result["facts"]
        compute = f["graph flops"] / f["device matmul flops"]
        memory = f["graph io bytes"] / f["device bandwidth"]
        lines.append(f"| {result['model']} | {result['mode']} | {int(f.get('kernels', 0))} | "
                     f"{f['graph flops'] / 1e9:.3g} | {f['graph io bytes'] / 1e6:,.1f} | "
                     f"{format_ms(max(compute, memory))} | "
                     f"{'flops' if compute >= memory else 'bytes'} |")
    first = results[0]["facts"] if results else None
    if first:
        lines.append("")
        lines.append(f"Peaks measured by Kiln's device profile: matmul "
                     f"{first['device matmul flops'] / 1e9:.1f} GFLOP/s, copy bandwidth "
                     f"{first['device bandwidth'] / 1e9:.1f} GB/s.")
    lines.append("")
    lines.append("Geometric means of Kiln's speedup over each peer (models where both were timed):")
    lines.append("")
    for mode in MODES:
        for peer in SYSTEMS[1:]:
            ratios = [r["systems"][peer]["median"] / r["systems"]["Kiln"]["median"]
                      for r in results if r["mode"] == mode
                      and "median" in r["systems"].get(peer, {})
                      and "median" in r["systems"].get("Kiln", {})]
            if ratios:
                lines.append(f"- {mode}, over {peer}: {geomean(ratios):.2f}x "
                             f"({len(ratios)} models)")
    return "\n".join(lines) + "\n"


def exit_status(results):
    """1, after saying which, when a system failed its check; else 0."""
    failed = [f"{r['model']} {r['mode']} {name}" for r in results
              for name, e in r["systems"].items() if not e["ok"]]
    if failed:
        print("checks failed: " + ", ".join(failed))
        return 1
    return 0


def bar_chart(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [f"{r['model']}\n{r['mode']}" for r in results]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(results)), 4.5))
    width = 0.8 / len(SYSTEMS)
    for i, name in enumerate(SYSTEMS):
        heights = []
        for r in results:
            eager = r["systems"].get("PyTorch eager", {}).get("median")
            median = r["systems"].get(name, {}).get("median")
            heights.append(eager / median if eager and median else 0)
        positions = [x + (i - (len(SYSTEMS) - 1) / 2) * width for x in range(len(results))]
        ax.bar(positions, heights, width, label=name)
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("speedup over PyTorch eager (higher is better)")
    ax.set_title("Kiln and its peers, same machine, threads and inputs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    args = parse_args()
    # Cold compile caches for torch.compile too, so its compile times compare with Kiln's.
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-peers-"))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor-cache")
    import onnxruntime as ort
    import torch
    import torch_zoo
    torch.set_num_threads(args.threads)
    # torch warns that padding="same" with an even kernel copies its input, and that sparse
    # tensors are a beta feature: both expected here.
    warnings.simplefilter("ignore", UserWarning)
    for model in args.models:
        if model not in torch_zoo.PRESETS:
            sys.exit(f"bench_peers.py: no PyTorch implementation of '{model}'")
    machine = machine_and_versions(args, torch, ort)
    print("machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()), flush=True)
    results = []
    try:
        measure_device_profile(args.kiln, args.threads, work)
        for model in args.models:
            for mode in args.modes:
                results.append(bench_one(args, torch, torch_zoo, model, mode, work))
                torch._dynamo.reset()
                gc.collect()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "peers.json").write_text(json.dumps({"machine": machine, "results": results},
                                               indent=1))
    (out / "peers.md").write_text(markdown(results, machine))
    bar_chart(results, out / "peers.png")
    print(f"wrote {out / 'peers.md'}, peers.json, peers.png")
    print(markdown(results, machine))
    return exit_status(results)


if __name__ == "__main__":
    sys.exit(main())
