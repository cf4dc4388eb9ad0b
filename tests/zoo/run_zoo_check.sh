#!/usr/bin/env bash
# Cross-checks one zoo preset against PyTorch: `kiln zoo dump` writes the preset's weights,
# data and Kiln's outputs, and zoo_check.py recomputes them with torch (see there). Uses
# $KILN_MODELS_PYTHON if set, else python3 on PATH, else Debian's /usr/bin/python3 (where
# python3-torch installs); exits 77, which CTest reports as skipped, when none has numpy and
# torch.
# Usage: run_zoo_check.sh KILN PRESET [kiln zoo dump options...]
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
kiln=$1
preset=$2
shift 2
for python in "${KILN_MODELS_PYTHON:-}" python3 /usr/bin/python3; do
  [[ -n $python ]] && command -v "$python" > /dev/null || continue
  # find_spec looks the packages up without importing them (importing torch takes seconds).
  if "$python" -c 'import importlib.util as u, sys
sys.exit(not all(u.find_spec(m) for m in ("numpy", "torch")))' 2> /dev/null; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$kiln" zoo dump "$preset" "$@" -o "$work/dump.npz" || exit 1
    "$python" "$here/zoo_check.py" "$preset" "$work/dump.npz"
    exit $?
  fi
done
echo "SKIP: no python3 with numpy and torch (Debian: apt-get install python3-torch python3-numpy)"
exit 77
