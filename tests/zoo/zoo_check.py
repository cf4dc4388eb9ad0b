"""Checks a Kiln zoo model against an independent PyTorch implementation of it.

Usage: zoo_check.py PRESET DUMP.npz

DUMP.npz is what `kiln zoo dump PRESET` writes: every input of the model's loss graph by name
(parameters such as "layer0.attn.wq", data such as "tokens" and "labels") and Kiln's outputs
"output/loss" and "output/logits" from its reference interpreter. This script builds the same
architecture with torch.nn.functional from those parameters (in float64), runs it on the same
data, and requires the loss and every logit to agree within a relative error of 1e-4. It then
computes each parameter's gradient with torch's autograd and compares every "grad/NAME" array
the dump holds (Kiln's gradient of the loss with respect to parameter NAME) the same way.

The PyTorch models are torch_zoo.py's (shared with bench/peers), written from the papers and
the zoo's documentation rather than from Kiln's code.

Exit status: 0 when everything agrees, 1 otherwise (each disagreement printed).
"""

import sys
import warnings

import numpy as np
import torch

from torch_zoo import DATA, PRESETS, forward

RTOL = 1e-4


def relative_error(kiln, torch_value, floor=1e-30):
    """max |kiln - torch| over max |torch|, the latter at least `floor`."""
    reference = torch_value.detach().numpy()
    scale = max(np.abs(reference).max(), floor)
    return float(np.abs(kiln.astype(np.float64) - reference).max() / scale)


def main():
    # torch warns that padding="same" with an even kernel copies the input: fine here.
    warnings.simplefilter("ignore", UserWarning)
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    preset, path = sys.argv[1], sys.argv[2]
    if preset not in PRESETS:
        sys.exit(f"zoo_check.py: no PyTorch implementation of preset '{preset}'")
    dump = dict(np.load(path))
    params, data = {}, {}
    for name, array in dump.items():
        if name.startswith(("output/", "grad/")):
            continue
        tensor = torch.from_numpy(array)
        if tensor.is_floating_point():
            tensor = tensor.double()
        if name in DATA:
            data[name] = tensor
        else:
            params[name] = tensor.requires_grad_()
    loss, logits = forward(preset, params, data, training=True)
    loss.backward()

    checks = [("loss", dump["output/loss"], loss), ("logits", dump["output/logits"], logits)]
    for name, array in dump.items():
        if name.startswith("grad/"):
            param = name[len("grad/"):]
            if param not in params:
                print(f"FAIL {name}: the model has no parameter '{param}'")
                return 1
            checks.append((name, array, params[param].grad))
    # Kiln's graphs are f32, so a gradient that is mathematically zero (an attention key bias:
    # softmax ignores a constant added to a row) comes out as f32 rounding noise, which no
    # relative measure accepts. Gradients are therefore measured against at least 1e-5 of the
    # model's largest gradient (zero gradients reach 1.6e-9 of it in vit-tiny; the smallest
    # non-zero ones, bert-tiny's query biases, are 7e-5 of it).
    largest_gradient = max((float(ref.abs().max()) for name, _, ref in checks
                            if name.startswith("grad/")), default=0.0)
    failures = 0
    for name, kiln, reference in checks:
        floor = 1e-5 * largest_gradient if name.startswith("grad/") else 1e-30
        if kiln.shape != tuple(reference.shape):
            print(f"FAIL {name}: Kiln's shape {kiln.shape}, torch's {tuple(reference.shape)}")
            failures += 1
            continue
        error = relative_error(kiln, reference, floor)
        if error > RTOL:
            print(f"FAIL {name}: relative error {error:.3g} > {RTOL}")
            failures += 1
    verdict = f"{failures} of {len(checks)} differ" if failures else "all agree"
    print(f"{preset}: loss {loss.item():.6g} (Kiln {float(dump['output/loss']):.6g}); loss, logits "
          f"and {len(checks) - 2} parameter gradients compared with relative tolerance {RTOL}: "
          f"{verdict}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
