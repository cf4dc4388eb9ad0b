#!/usr/bin/env bash
# The GPU bundle (scripts/gpu-bundle) on this machine: it builds within its size, and unpacked,
# with LD_LIBRARY_PATH cleared, its kiln runs, finds every library but the system's in the
# bundle, compiles and checks a model on the CPU against the bundle's headers and libraries,
# and runs gpu-check to its report (whose GPU checks fail here when there is no GPU). Where
# `make python` has built the package (build/python, .venv), the bundle's Python package builds
# its extension for .venv's Python and compiles a function under torch.compile against the
# bundle's headers.
# Usage: bundle_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
source_dir=$1
build_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KILN_CACHE_DIR=$work/cache
unset LD_LIBRARY_PATH
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

"$source_dir/scripts/gpu-bundle" "$work/kiln-gpu.tar.xz" "$build_dir" || fail "the bundle does not build"
tar -C "$work" -xJf "$work/kiln-gpu.tar.xz" || fail "the bundle does not unpack"
kiln=$work/kiln/bin/kiln

"$kiln" --version | grep -q '^kiln ' || fail "kiln --version from the bundle"
outside=$(ldd "$kiln" "$work/kiln/bin/kiln-gpu-ops-tests" | awk '$2 == "=>" { print $1, $3 }' |
  grep -v " $work/kiln/" |
  grep -Ev '^(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|libgomp)\.so')
[[ -z $outside ]] || fail "libraries found outside the bundle: $outside"

for script in bin/bench-gpu share/kiln/bench/gpu/bench_gpu.py share/kiln/bench/peers/bench_peers.py \
  share/kiln/tests/zoo/torch_zoo.py; do
  [[ -s $work/kiln/$script ]] || fail "the bundle has no $script"
done
python3 -m py_compile "$work"/kiln/share/kiln/bench/gpu/*.py || fail "bench_gpu.py does not compile"

out=$("$kiln" run "$work/kiln/share/kiln/examples/encoder_layer.kiln" --check 2>&1)
grep -q 'check: all [0-9]* kernels agree' <<<"$out" || fail "a CPU compile from the bundle: $out"

"$work/kiln/bin/gpu-check" "$work/report" >"$work/gpu-check.log" 2>&1
grep -q '^| kiln | pass |' "$work/gpu-check.log" || fail "gpu-check: $(tail -30 "$work/gpu-check.log")"
grep -q '^| cpu compile | pass |' "$work/gpu-check.log" || fail "gpu-check's CPU compile"
grep -q '^gpu-check: [0-9]* of [0-9]* passed' "$work/gpu-check.log" || fail "gpu-check's summary"
python3 -m json.tool "$work/report/gpu-check.json" >/dev/null || fail "gpu-check.json"
[[ -s $work/report/gpu-check.md ]] || fail "gpu-check.md"

venv_python=$source_dir/.venv/bin/python
if [[ -f $work/kiln/python/CMakeLists.txt && -x $venv_python ]]; then
  pythonpath=$(PYTHON=$venv_python "$work/kiln/bin/build-python" 2>"$work/build-python.log") ||
    fail "build-python: $(tail -20 "$work/build-python.log")"
  out=$(cd "$work" && PYTHONPATH=$pythonpath "$venv_python" -c "
import kiln, torch
assert kiln.__file__.startswith('$work/kiln/python/'), kiln.__file__
f = torch.compile(lambda x: (x * 2).relu(), backend=kiln.make_backend(), dynamic=False)
x = torch.randn(4, 5)
assert torch.equal(f(x), (x * 2).relu())
print('python: ok')" 2>&1)
  grep -q '^python: ok' <<<"$out" || fail "the bundle's Python package: $out"
fi

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "bundle_test: all passed"
