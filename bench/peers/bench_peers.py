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

Before any timing, every system's output is checked against PyTorch eager's, the reference:
Kiln's, ONNX Runtime's and torch.compile's. Inference: the logits within a relative error of
1e-3 (of eager's largest logit). The training step (one Adam step from zero moments):
- the loss within 1e-3 relative;
- each parameter's gradient, and Adam's exp_avg, within 5e-2 of eager's in norm (|x - eager's|
  / |eager's| in L2, eager's norm taken as at least 1e-4 of the largest tensor's, so that a
  gradient that is mathematically zero, as an attention key bias's, is compared as the noise it
  is), or within 4 times eager's own f32 error if that is more; exp_avg_sq within twice that (a
  square's relative error is twice its root's). Eager's own error is its f32 gradient's against
  its gradient in float64 on the same inputs (one more step, float64, not timed). Why: the
  systems sum in different orders, which moves most gradients by about 1e-6 of their norm, and
  a ReLU or max-pool input within rounding of its kink goes one way in one system and the other
  in another and moves one channel's gradient by its share (one position of a few hundred);
  5e-2 is far above that and far below a gradient off by 2x (1 in norm) or of the wrong sign
  (2). But where f32 cannot do better, no system can: resnet-50's batch-norm scales and biases
  (sums over up to 25,088 positions that nearly cancel) are 2.4e-2 from float64 in eager
  itself, and Kiln's 2.6e-2 from eager's; 4 times eager's own error is about 3 times the most
  Kiln was seen to differ by, relative to it. Kiln's gradient is read from its exp_avg
  (m' = beta1 m + (1 - beta1) g), and its moments from a second run of the same compiled step:
  `kiln zoo run MODEL --train`, which loads the session's compilation from their kernel cache
  and runs it on the preset's own inputs (the session's; its loss must be the session's) and
  writes every output (`kiln zoo bench` writes the loss and the updated parameters only);
- each updated parameter, element by element, within 1e-3 lr (beyond the f32 rounding of the
  parameter) of torch.optim.Adam's step from the same parameters with the system's own
  gradient: Adam's first step is about lr times the sign of each gradient element, whatever its
  size, so updated parameters compared with eager's would only compare signs; the gradient is
  held to eager's above, and the update to what Adam makes of it here. An element whose
  gradient is f32 noise (within 4 times eager's f32 error of that element, or below 1e-6 of the
  model's largest gradient) may step either way, by at most lr: a system may compute a
  gradient twice, for the moment it writes and for the update, with different rounding (Kiln
  did so in one compilation of resnet-50, for 570 elements, all such noise).
A system that disagrees is reported (CHECK FAILED, naming the tensors and errors) and not
timed; the others still are, and the script exits with status 1. Kiln's disagreement fails
Kiln's entry, never a peer's.

KILN_BENCH_CORRUPT_GRADIENT=1 (a test of the training check) doubles one gradient in Kiln's
outputs as a wrong backward would show there: its first parameter's exp_avg doubled and
exp_avg_sq quadrupled (Adam's update hardly changes); Kiln's training check must then fail.

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
GRADIENT_RTOL = 5e-2      # a gradient's or exp_avg's error in norm, relative (twice: exp_avg_sq)
F32_ERROR_FACTOR = 4      # ... or this many times eager's own f32 error (against f64), if more
NOISE_GRADIENT = 1e-6     # of the model's largest gradient: below it (or below F32_ERROR_FACTOR
                          # times eager's f32 error in that element), a gradient is f32 noise
NORM_FLOOR = 1e-4         # a tensor's norm is taken as at least this share of the largest's
UPDATE_ATOL = 1e-3        # of lr: an updated parameter against Adam's step of its own gradient
REFERENCE = "PyTorch eager"  # every check's
CORRUPT_GRADIENT = os.environ.get("KILN_BENCH_CORRUPT_GRADIENT", "") not in ("", "0")
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
        self.kiln, self.model, self.device, self.env = kiln, model, device, env
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

    def every_output(self):
        """Every output of the preset's training step, by name: `kiln zoo run MODEL --train`,
        which loads the session's compilation from their kernel cache (--reuse-compilations,
        its default), runs it on the preset's own inputs, as the session did, and writes all
        its outputs, Adam's moments among them (`kiln zoo bench` writes the loss and the
        updated parameters only)."""
        written = self.npz.with_name(self.npz.stem + "-every-output.npz")
        try:
            ran = subprocess.run([self.kiln, "zoo", "run", self.model, "--train", "--device",
                                  self.device, "-o", str(written)],
                                 env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True, check=False)
            if ran.returncode != 0:
                raise RuntimeError(f"kiln zoo run {self.model} --train failed:\n{ran.stderr}")
            with np.load(written) as archive:
                return {n: archive[n] for n in archive.files}
        finally:
            written.unlink(missing_ok=True)

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


def inference_systems(args, torch, torch_zoo, model, inputs, kiln_logits, work):
    """Kiln's check, (ok, text), and (name, compile seconds, check, run) for ONNX Runtime,
    PyTorch eager and torch.compile: every system's logits against PyTorch eager's."""
    import onnxruntime as ort
    data_names, parameter_names = split_inputs(torch_zoo, inputs)
    params = torch_inputs(torch, torch_zoo, inputs, parameter_names)
    data = torch_inputs(torch, torch_zoo, inputs, data_names)
    if "adjacency.row_ptr" in data:  # built once, as a GCN user would
        data["adjacency"] = torch_zoo.adjacency_matrix(data)

    def forward(p, d):
        return torch_zoo.forward(model, p, d, training=False)[1]

    pytorch = []
    for name, fn in ((REFERENCE, forward), ("torch.compile", torch.compile(forward))):
        def run(fn=fn):
            with torch.inference_mode():
                return fn(params, data)
        start = time.perf_counter()
        logits = run().numpy()
        compile_seconds = time.perf_counter() - start if name == "torch.compile" else 0.0
        if name == REFERENCE:
            reference = logits
        check = ((True, "the reference") if name == REFERENCE
                 else check_logits(name, logits, reference))
        pytorch.append((name, compile_seconds, check, timed(run)))

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
    systems = [("ONNX Runtime", compile_seconds, check_logits("ort", logits, reference),
                timed(lambda: session.run(None, feeds)))] + pytorch
    return check_logits("Kiln", kiln_logits, reference), systems


def corrupted_gradient(trainable, inputs, kiln_outputs, beta1, beta2):
    """KILN_BENCH_CORRUPT_GRADIENT's wrong backward, in Kiln's outputs: the first parameter's
    gradient doubled shows in Adam's moments (exp_avg twice, exp_avg_sq four times what they
    should be: m' - beta1 m and v' - beta2 v are (1 - beta1) g and (1 - beta2) g^2); its update,
    m'/(sqrt(v') + eps) after the bias corrections, hardly changes, as Adam's direction does not
    depend on the gradient's scale. The parameter's name."""
    name = trainable[0]
    for moment, beta, factor in (("m", beta1, 2.0), ("v", beta2, 4.0)):
        old = inputs[f"{name}.{moment}"].astype(np.float64)
        new = kiln_outputs[f"{name}.{moment}.next"].astype(np.float64)
        kiln_outputs[f"{name}.{moment}.next"] = (
            beta * old + factor * (new - beta * old)).astype(inputs[name].dtype)
    return name


def relative_norm_error(value, reference, floor):
    """|value - reference| / max(|reference|, floor) in the L2 norm, and the max abs error."""
    difference = np.asarray(value, dtype=np.float64) - np.asarray(reference, dtype=np.float64)
    scale = max(float(np.linalg.norm(reference.astype(np.float64))), floor, 1e-30)
    return float(np.linalg.norm(difference)) / scale, float(np.abs(difference).max(initial=0.0))


def f32_gradient_error(torch, torch_zoo, model, inputs, trainable, data, gradient, device):
    """Per parameter, how far PyTorch eager's f32 gradient (`gradient`) is from its gradient in
    float64 on the same inputs (`data`: the f32 data on `device`): (relative in norm, the norm
    taken as at least NORM_FLOOR of the largest; each element's error), how well f32 can compute
    that gradient at all. None when the float64 step cannot run."""
    try:
        params = {n: torch.from_numpy(np.array(inputs[n], dtype=np.float64)).to(device)
                  .requires_grad_() for n in trainable}
        data64 = {n: t.double() if t.is_floating_point() else t for n, t in data.items()}
        torch_zoo.forward(model, params, data64, training=True)[0].backward()
        exact = {n: p.grad.cpu().numpy() for n, p in params.items()}
    except Exception as error:  # pylint: disable=broad-except
        print(f"   the float64 step did not run ({type(error).__name__}): no f32 error allowance",
              flush=True)
        return None
    del params, data64
    floor = NORM_FLOOR * max(float(np.linalg.norm(g)) for g in exact.values())
    return {n: (relative_norm_error(gradient[n], exact[n], floor)[0],
                np.abs(gradient[n] - exact[n]).astype(np.float32)) for n in trainable}


def check_training(torch, result, reference, inputs, trainable, lr, beta1, beta2, eps):
    """A training step's result against the reference's (PyTorch eager's), both dicts of the
    loss, and per parameter its gradient, updated value, exp_avg and exp_avg_sq: (ok, text).
    The loss within LOSS_RTOL; each gradient and exp_avg within reference["allowed"] in norm
    (per parameter: GRADIENT_RTOL, or F32_ERROR_FACTOR times eager's own f32 error if more), each
    exp_avg_sq within twice that (a square's relative error is twice its root's); and each
    updated parameter within UPDATE_ATOL * lr (beyond the f32 rounding of the parameter) of
    torch.optim.Adam's step from the system's own gradient."""
    failures, worst = [], {}
    loss_error = abs(result["loss"] - reference["loss"]) / max(abs(reference["loss"]), 1e-30)
    if not loss_error <= LOSS_RTOL:
        failures.append(f"loss {result['loss']:.7g} against {reference['loss']:.7g}: rel. error "
                        f"{loss_error:.1e} > {LOSS_RTOL}")
    for kind, factor in (("gradient", 1), ("exp_avg", 1), ("exp_avg_sq", 2)):
        floor = NORM_FLOOR * max(float(np.linalg.norm(reference[kind][n].astype(np.float64)))
                                 for n in trainable)
        worst[kind] = (-1.0, 0.0, 0.0, "")  # error / allowed, error, allowed, name
        for n in trainable:
            allowed = factor * reference["allowed"][n]
            error, max_abs = relative_norm_error(result[kind][n], reference[kind][n], floor)
            if not error <= allowed:  # a NaN fails too
                failures.append(f"{kind} of {n}: rel. error in norm {error:.2e} > {allowed:.2g}, "
                                f"max abs error {max_abs:.3g}")
            if not error / allowed <= worst[kind][0]:
                worst[kind] = (error / allowed, error, allowed, n)
    # The update: torch.optim.Adam's first step from the same parameters with the system's own
    # gradient, which the checks above hold to the reference's. Compared element by element.
    params = {n: torch.from_numpy(np.array(inputs[n], dtype=np.float32)) for n in trainable}
    for n, p in params.items():
        p.grad = torch.from_numpy(np.array(result["gradient"][n], dtype=np.float32))
    torch.optim.Adam(list(params.values()), lr=lr, betas=(beta1, beta2), eps=eps).step()
    worst_update, worst_update_name, noise_count, count = 0.0, "", 0, 0
    for n in trainable:
        expected = params[n].detach().numpy().astype(np.float64)
        start = np.asarray(inputs[n], dtype=np.float64)
        rounding = 2 * np.finfo(np.float32).eps * np.maximum(np.abs(start), np.abs(expected))
        excess = np.maximum(np.abs(result["updated"][n].astype(np.float64) - expected) - rounding,
                            0.0) / lr
        # An element whose gradient is within f32 noise of zero may step either way (at most
        # lr each way): a system may compute the gradient twice, for the moment it writes and
        # for the update, with different rounding.
        noise = np.abs(result["gradient"][n]) <= reference["noise"][n]
        noise_count += int((noise & (excess > UPDATE_ATOL)).sum())
        count += noise.size
        error = float(np.where(noise, 0.0, excess).max(initial=0.0))
        beyond_two = float(excess.max(initial=0.0))
        if not error <= UPDATE_ATOL:
            failures.append(f"updated {n}: {error:.2e} lr from torch.optim.Adam's step of its "
                            f"own gradient > {UPDATE_ATOL:g} lr")
        elif not beyond_two <= 2:  # more than two first steps apart
            failures.append(f"updated {n}: {beyond_two:.2e} lr from torch.optim.Adam's step of "
                            "its own gradient > 2 lr")
        if error > worst_update or not worst_update_name:
            worst_update, worst_update_name = error, n

    def nearest(kind):
        _, error, allowed, name = worst[kind]
        return f"{error:.1e} ({name}, allowed {allowed:.2g})"
    text = (f"loss rel. error {loss_error:.1e}; in norm, nearest their tolerance: gradients "
            f"{nearest('gradient')}, exp_avg {nearest('exp_avg')}, exp_avg_sq "
            f"{nearest('exp_avg_sq')}; updates {worst_update:.1e} lr from Adam's"
            + (f" but for {noise_count} of {count} elements, whose gradient is f32 noise"
               if noise_count else ""))
    if failures:
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        return False, "; ".join(failures[:3]) + more + "; " + text
    return True, text


TRAINING_PEERS = ("PyTorch eager", "torch.compile")


def training_systems(torch, torch_zoo, model, inputs, outputs, kiln_state, names=TRAINING_PEERS,
                     device="cpu"):
    """Kiln's check, (ok, text), and (name, compile seconds, check, run) for each of the PyTorch
    systems `names` (PyTorch eager, torch.compile, torch.compile (reduce-overhead)) on `device`.
    `outputs` are Kiln's session's (the loss and updated parameters), `kiln_state` its step's
    every output on the same inputs (Adam's moments among them). PyTorch eager's first step is
    the reference of every check, run even when eager is not among `names`; a system that cannot
    run the model, or whose result disagrees with eager's, is reported and not timed."""
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
    for n in trainable:
        for moment in ("m", "v"):
            if np.any(inputs[f"{n}.{moment}"]):
                raise RuntimeError(f"kiln's first step starts from a nonzero {n}.{moment}")
    beta1, beta2, eps = 0.9, 0.999, 1e-8  # Kiln's Adam's defaults, as torch.optim.Adam's
    loss_name = next(n for n in outputs if not n.endswith(".next"))
    kiln_loss = float(outputs[loss_name])
    rerun_loss = float(kiln_state[loss_name[len("output/"):]])
    rerun_differs = not abs(rerun_loss - kiln_loss) <= LOSS_RTOL * abs(kiln_loss)
    if CORRUPT_GRADIENT:
        name = corrupted_gradient(trainable, inputs, kiln_state, beta1, beta2)
        print(f"   KILN_BENCH_CORRUPT_GRADIENT: {name}'s gradient doubled in Kiln's outputs",
              flush=True)
    kiln_result = {
        "loss": kiln_loss,
        "updated": {n: outputs[f"output/{n}.next"] for n in trainable},
        "exp_avg": {n: kiln_state[f"{n}.m.next"] for n in trainable},
        "exp_avg_sq": {n: kiln_state[f"{n}.v.next"] for n in trainable},
        # m' = beta1 m + (1 - beta1) g: the gradient Kiln's step computed.
        "gradient": {n: ((kiln_state[f"{n}.m.next"].astype(np.float64)
                          - beta1 * inputs[f"{n}.m"].astype(np.float64))
                         / (1 - beta1)).astype(np.float32) for n in trainable},
    }
    runs, checks, reference = {}, {}, None
    for name in [REFERENCE] + [n for n in names if n != REFERENCE]:
        params = {n: torch.from_numpy(np.array(inputs[n])).to(device).requires_grad_()
                  for n in trainable}
        optimizer = torch.optim.Adam(list(params.values()), lr=lr, betas=(beta1, beta2), eps=eps)

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
            checks[name] = (False, f"did not run: {why}")
            if name == REFERENCE:  # every check is against it
                break
            continue
        compile_seconds = time.perf_counter() - start if name != "PyTorch eager" else 0.0

        def host(tensor):
            return tensor.detach().cpu().numpy().copy()
        result = {
            "loss": loss,
            "updated": {n: host(p) for n, p in params.items()},
            "gradient": {n: host(p.grad) for n, p in params.items()},
            "exp_avg": {n: host(optimizer.state[p]["exp_avg"]) for n, p in params.items()},
            "exp_avg_sq": {n: host(optimizer.state[p]["exp_avg_sq"])
                           for n, p in params.items()},
        }
        if name == REFERENCE:
            reference = result
            errors = f32_gradient_error(torch, torch_zoo, model, inputs, trainable, data,
                                        result["gradient"], device)
            reference["allowed"], reference["noise"] = {}, {}
            largest = max(float(np.abs(g).max(initial=0.0)) for g in result["gradient"].values())
            for n in trainable:
                in_norm, each = errors[n] if errors else (0.0, 0.0)
                reference["allowed"][n] = max(GRADIENT_RTOL, F32_ERROR_FACTOR * in_norm)
                reference["noise"][n] = np.maximum(F32_ERROR_FACTOR * each,
                                                   NOISE_GRADIENT * largest)
            worst = max(errors, key=lambda n: errors[n][0]) if errors else None
            checks[name] = (True, "the reference" + (
                f"; its f32 gradients within {errors[worst][0]:.1e} of its float64 ones in norm "
                f"({worst})" if errors else ""))
        else:
            checks[name] = check_training(torch, result, reference, inputs, trainable, lr, beta1,
                                          beta2, eps)
        del result
        runs[name] = (step, compile_seconds)
    if reference is None:
        kiln_check = (False, f"not checked: {REFERENCE}, the reference, {checks[REFERENCE][1]}")
    elif rerun_differs:
        kiln_check = (False, f"not checked: the loss of kiln zoo run, which gives the moments, "
                      f"{rerun_loss:.7g}, is not the session's {kiln_loss:.7g}")
    else:
        kiln_check = check_training(torch, kiln_result, reference, inputs, trainable, lr, beta1,
                                    beta2, eps)
    systems = []
    for name in names:
        ok, text = checks.get(name, (False, f"not run: {REFERENCE}, the reference, did not run"))
        step, compile_seconds = runs.get(name, (None, 0.0))
        systems.append((name, compile_seconds, (ok, text),
                        timed(step, wait) if step is not None else None))
    return kiln_check, systems


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
        if mode == "inference":
            kiln_logits = next(iter(outputs.values()))
            kiln_check, peers = inference_systems(args, torch, torch_zoo, model, inputs,
                                                  kiln_logits, work)
        else:
            kiln_state = kiln.every_output()
            kiln_check, peers = training_systems(torch, torch_zoo, model, inputs, outputs,
                                                 kiln_state, names, device)
            del kiln_state
        result["systems"]["Kiln"] = {"compile_seconds": facts["compile seconds"],
                                     "check": kiln_check[1], "ok": kiln_check[0]}
        print(f"   Kiln: {'ok' if kiln_check[0] else 'CHECK FAILED'}: {kiln_check[1]}",
              flush=True)
        del inputs, outputs
        gc.collect()
        runners = {"Kiln": kiln.run} if kiln_check[0] else {}
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
                 "training step is forward, backward and an Adam update. check: each system's "
                 "result against PyTorch eager's (bench/peers/bench_peers.py says how); one that "
                 "fails it is not timed.")
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
