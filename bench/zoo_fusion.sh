#!/usr/bin/env bash
# The fusion table: five zoo models (bert-base, vit-base, resnet-50, xml-cnn, gcn-cora), inference
# graph and Adam training step, each compiled unfused, fused greedily and fused by the ILP
# (`kiln zoo compare`): kernels, estimated time and bytes, arena peak, compile time, median
# measured time and speedup over unfused. Ends with the geometric mean of the training-step
# speedups, then the graph-rewrite ablation of each training step (`kiln zoo compare --train
# --ablate-rewrites`: the ILP's plan with no rewrites, all, and all but one, loss elimination and
# decomposition included), then the substitution ablation of each inference graph with its
# weights frozen (`kiln zoo compare --inference --freeze --ablate-substitution`: the ILP's plan
# without and with the substitution search). Long: an hour or more on a 2-core machine;
# ABLATE=0 skips the rewrite ablation, SUBSTITUTE=0 the substitution one.
#
# Usage: [ABLATE=0] [SUBSTITUTE=0] bench/zoo_fusion.sh KILN_BINARY [REPEAT]
set -euo pipefail

kiln=$1
repeat=${2:-3}
models=(bert-base vit-base resnet-50 xml-cnn gcn-cora)

speedups=()
for model in "${models[@]}"; do
  for graph in --inference --train; do
    output=$("$kiln" zoo compare "$model" "$graph" --repeat "$repeat")
    echo "$output"
    echo
    if [[ $graph == --train ]]; then
      speedups+=("$(awk '$1 == "ilp" { sub(/x$/, "", $NF); print $NF }' <<<"$output")")
    fi
  done
done

python3 - "${speedups[@]}" <<'PY'
import math, sys
values = [float(v) for v in sys.argv[1:]]
print(f"training steps, ILP over unfused: geometric mean {math.exp(sum(map(math.log, values)) / len(values)):.2f}x"
      f" ({', '.join(f'{v:.2f}x' for v in values)})")
PY

if [[ ${ABLATE:-1} != 0 ]]; then
  for model in "${models[@]}"; do
    echo
    "$kiln" zoo compare "$model" --train --ablate-rewrites --repeat "$repeat"
  done
fi

if [[ ${SUBSTITUTE:-1} != 0 ]]; then
  for model in "${models[@]}"; do
    echo
    "$kiln" zoo compare "$model" --inference --freeze --ablate-substitution --repeat "$repeat"
  done
fi
