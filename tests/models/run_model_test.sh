#!/usr/bin/env bash
# Runs run_model_test.py (see there) with a Python that has numpy, torch and torchvision:
# $KILN_MODELS_PYTHON if set, else python3 on PATH, else Debian's /usr/bin/python3 (where
# python3-torch installs, even when another python3 comes first on PATH). Exits 77, which CTest
# reports as skipped, when there is none.
# Usage: run_model_test.sh KILN MODEL FIXTURE_ROOT
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
for python in "${KILN_MODELS_PYTHON:-}" python3 /usr/bin/python3; do
  [[ -n $python ]] && command -v "$python" > /dev/null || continue
  # find_spec looks the packages up without importing them (importing torch takes seconds).
  if "$python" -c 'import importlib.util as u, sys
sys.exit(not all(u.find_spec(m) for m in ("numpy", "torch", "torchvision")))' 2> /dev/null; then
    exec "$python" "$here/run_model_test.py" "$@"
  fi
done
echo "SKIP: no python3 with numpy, torch and torchvision" \
  "(Debian: apt-get install python3-torch python3-torchvision python3-numpy)"
exit 77
