#!/usr/bin/env bash
# The CUDA back end on a machine without a GPU (CI's): for each tiny zoo model, inference and
# training step,
#  - the GPU mapping compiled for this CPU and every kernel checked against the reference
#    interpreter (--device cuda-mapping-on-cpu --check), and
#  - the CUDA C compiled by NVRTC for sm_90 (--device cuda), skipped when Kiln was built
#    without the CUDA toolkit.
# vit-tiny's training step has Adam updates of gradients that cancel to near Adam's epsilon:
# the check judges those by their sensitivity to rounding (compiler/run.h).
# Usage: cuda_test.sh KILN_BINARY
set -uo pipefail
kiln="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export KILN_CACHE_DIR="$work/cache"
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

nvrtc=1
if "$kiln" zoo compile mlp-tiny --inference --device cuda -o "$work/probe" 2>&1 |
  grep -q "built without the CUDA toolkit"; then
  echo "SKIP: NVRTC (Kiln was built without the CUDA toolkit)"
  nvrtc=0
fi

for model in mlp-tiny bert-tiny vit-tiny resnet-tiny xml-cnn-tiny gcn-tiny; do
  for mode in --inference --train; do
    out="$("$kiln" zoo run "$model" "$mode" --device cuda-mapping-on-cpu --check 2>&1)" ||
      fail "$model $mode: the GPU mapping does not match the reference: $out"
    grep -q "^check: all .* kernels agree" <<<"$out" || fail "$model $mode: no check line: $out"
    if ((nvrtc)); then
      out="$("$kiln" zoo compile "$model" "$mode" --device cuda -o "$work/$model$mode" 2>&1)" ||
        fail "$model $mode: CUDA does not compile: $out"
      [[ -s "$work/$model$mode/kernels.cubin" ]] || fail "$model $mode: no cubin"
      grep -q "__global__" "$work/$model$mode/kernels.cu" || fail "$model $mode: no CUDA kernels"
    fi
  done
done

# Running on CUDA: on a machine with a GPU it runs; without one (or without its driver) it is
# a clear error, not a crash.
out="$("$kiln" zoo run mlp-tiny --inference --device cuda 2>&1)"
status=$?
if [[ $status -ne 0 ]]; then
  grep -Eq "no NVIDIA driver|no CUDA device|without the CUDA toolkit" <<<"$out" ||
    fail "run --device cuda: unexpected message: $out"
fi

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "cuda_test: all passed"
