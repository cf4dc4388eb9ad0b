#!/usr/bin/env bash
# End-to-end tests of the `kiln` command line: exit codes (0 success, 1 user error, 2 usage
# error), messages that name the file and position, and --help on every subcommand.
# Usage: cli_test.sh KILN_BINARY SOURCE_DIR
set -uo pipefail

kiln=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

passed=0
failed=0

# expect NAME EXIT_CODE PATTERN -- COMMAND...: runs COMMAND, checks its exit code and that its
# combined output matches the extended regex PATTERN.
expect() {
  local name=$1 want_code=$2 pattern=$3
  shift 4
  local output code
  output=$("$@" 2>&1)
  code=$?
  if [[ $code -ne $want_code ]]; then
    echo "FAIL $name: exit code $code, want $want_code"; echo "$output" | head -20
    failed=$((failed + 1))
  elif ! grep -Eq -- "$pattern" <<<"$output"; then
    echo "FAIL $name: output does not match /$pattern/"; echo "$output" | head -20
    failed=$((failed + 1))
  else
    passed=$((passed + 1))
  fi
}

example=$source_dir/examples/encoder_layer.kiln

expect check-example 0 '%y f32\[2,16,64\]: min .* max .* mean .* std' -- "$kiln" check "$example"
expect check-seed-changes-values 0 'seed 7' -- "$kiln" check --seed 7 "$example"
expect print-example 0 '^graph @encoder_layer\(' -- "$kiln" print "$example"
expect ops-list 0 '^[0-9]+ ops$' -- "$kiln" ops
expect ops-one 0 'transpose_b : bool = false' -- "$kiln" ops matmul
expect ops-onnx 0 '^[0-9]+ ONNX op types import$' -- "$kiln" ops --onnx
expect ops-unknown 1 "unknown op 'no_such_op'" -- "$kiln" ops no_such_op

# Printing is canonical: printing the printed form gives the same text.
"$kiln" print "$example" >"$work/once.kiln"
expect print-is-a-fixed-point 0 '' -- bash -c "'$kiln' print '$work/once.kiln' | cmp - '$work/once.kiln'"

# User errors: exit 1, message names the file and line:column.
printf 'graph @g(%%x: f32[2]) {\n  %%y = exp(%%x) : f32[3]\n  return %%y\n}\n' >"$work/bad_type.kiln"
expect wrong-type 1 'bad_type.kiln:2:[0-9]+: .*f32\[3\].*f32\[2\]|bad_type.kiln:2:[0-9]+: .*f32\[2\].*f32\[3\]' \
  -- "$kiln" check "$work/bad_type.kiln"
printf 'graph @g(%%x: f32[2]) {\n  %%y = frobnicate(%%x) : f32[2]\n  return %%y\n}\n' >"$work/bad_op.kiln"
expect unknown-op 1 "bad_op.kiln:2:[0-9]+: .*frobnicate" -- "$kiln" check "$work/bad_op.kiln"
head -c 40 "$example" >"$work/truncated.kiln"
expect truncated 1 'truncated.kiln:[0-9]+:[0-9]+: ' -- "$kiln" check "$work/truncated.kiln"
: >"$work/empty.kiln"
expect empty-file 1 'empty.kiln:1:1: ' -- "$kiln" print "$work/empty.kiln"
expect missing-file 1 'no_such_file.kiln: no such file' -- "$kiln" check "$work/no_such_file.kiln"
expect directory 1 'is a directory' -- "$kiln" check "$work"

# kiln run: IR text and ONNX models, inputs from files, comparison with expected outputs.
expect run-ir-random-inputs 0 'random inputs \(seed 0\): %x, %wq' -- "$kiln" run "$example"
# Compiled runs: the check mode, the profile, repeated timing, the interpreter on request.
expect run-compiled 0 'outputs \(compiled\)' -- "$kiln" run "$example"
expect run-interpret 0 'outputs \(reference interpreter, f64\)' -- "$kiln" run "$example" --interpret
expect run-check 0 'check: all [0-9]+ kernels agree with the reference' -- "$kiln" run "$example" --check
expect run-profile 0 'share +kernel' -- "$kiln" run "$example" --profile
expect run-repeat 0 'time per run \(3 runs after a warm-up\): median' -- "$kiln" run "$example" --repeat 3
expect run-repeat-negative 2 'repeat' -- "$kiln" run "$example" --repeat -1
expect run-check-interpret 1 'apply to compiled runs' -- "$kiln" run "$example" --interpret --check
# A compiled run prints and writes the outputs the interpreter computes, also where compiling
# renamed one (decomposing a softmax that is the graph's output replaces it).
printf 'graph @g(%%a: f32[50,50], %%b: f32[50,7]) {\n  %%m = matmul(%%a, %%b) : f32[50,7]\n  %%y = log_softmax(%%m) : f32[50,7]\n  return %%y\n}\n' >"$work/renamed.kiln"
"$kiln" run "$work/renamed.kiln" --interpret --output "$work/renamed.npz" >/dev/null
expect run-renamed-output 0 'vs expected: .*within tolerance' \
  -- "$kiln" run "$work/renamed.kiln" --expected "$work/renamed.npz" --no-reuse-compilations
expect compile-writes 0 'wrote .*kernels.cc, kernels.loop, plan.txt' -- "$kiln" compile "$example" -o "$work/compiled" --fusion off
expect compile-plan 0 'kernel 0: matmul' -- cat "$work/compiled/plan.txt"
expect compile-source 0 'extern "C" void kiln_kernel_13' -- cat "$work/compiled/kernels.cc"
# The fusion and rewrite checks below leave the substitution search out (at the reference
# profile it merges the example's Q, K and V projections, 25 -> 26 nodes); it has its own.
expect compile-fused 0 'fusion ilp: 25 nodes in [0-9]+ kernels' -- "$kiln" compile "$example" -o "$work/fused" --no-substitute
expect compile-fused-plan 0 'fused matmul\+add\+gelu' -- cat "$work/fused/plan.txt"
# Fusion: modes, the explanation, rules disabled by name.
expect run-unfused 0 'fusion off: 25 nodes in 21 kernels' \
  -- "$kiln" run "$example" --fusion off --no-reuse-compilations
expect run-greedy 0 'fusion greedy: 25 nodes in' -- "$kiln" run "$example" --fusion greedy --check --no-substitute
expect run-bad-fusion 2 'fusion' -- "$kiln" run "$example" --fusion fast
expect explain 0 'cut edges:' -- "$kiln" explain "$example"
expect explain-reason 0 'operand of the contraction' -- "$kiln" explain "$example"
expect explain-rewrites 0 'graph rewrites: 26 nodes -> 26; fold-constants' -- "$kiln" explain "$example" --no-substitute
expect explain-substitutes 0 'substitutions: 2 rewrites in 2 steps' -- "$kiln" explain "$example"
expect explain-decompose 0 'decompose layer_norm \(2 nodes\): estimated .* whole, .* decomposed: kept whole' -- "$kiln" explain "$example"
expect explain-no-decompose 0 '^0$' -- bash -c "'$kiln' explain '$example' --disable-rewrite decompose | grep -c '^decompose' || true"
expect explain-no-rewrites 0 'graph rewrites: off' -- "$kiln" explain "$example" --no-rewrites
expect explain-bad-rewrite 2 'disable-rewrite' -- "$kiln" explain "$example" --disable-rewrite fold-everything
# Mixed precision on the CPU: the convolutions and their gradients are kernels in bf16.
expect explain-bf16-conv 0 'in bf16 +%[0-9]+ = conv_channels_last' -- bash -c \
  "'$kiln' explain zoo:resnet-tiny --precision bf16 | paste -sd' '"
expect explain-bf16-conv-gradients 0 'in bf16 +%[0-9]+ = conv_grad_weight' -- bash -c \
  "'$kiln' explain zoo:resnet-tiny --train --precision bf16 | paste -sd' '"
expect explain-disabled 0 "rule 'matmul-epilogue' is disabled" \
  -- "$kiln" explain "$example" --disable-rule matmul-epilogue
expect explain-bad-rule 2 'disable-rule' -- "$kiln" explain "$example" --disable-rule nope
expect compile-needs-output 2 'output' -- "$kiln" compile "$example"
printf 'graph @g(%%x: f32[2]) {\n  %%y = relu(%%x) : f32[2]\n  return %%y\n}\n' >"$work/relu.kiln"
python3 - "$work" <<'PY'
import struct, sys
# NumPy .npy v1.0 files written by hand: f32 [-1, 2] as input, [0, 2] and [0, 3] as outputs.
def npy(path, values):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"
    header += " " * (63 - len(header)) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<2f", *values))
npy(sys.argv[1] + "/x.npy", [-1.0, 2.0])
npy(sys.argv[1] + "/y_good.npy", [0.0, 2.0])
npy(sys.argv[1] + "/y_bad.npy", [0.0, 3.0])
PY
expect run-expected-match 0 'within tolerance' \
  -- "$kiln" run "$work/relu.kiln" --input "x=$work/x.npy" --expected "y=$work/y_good.npy"
expect run-expected-mismatch 1 'MISMATCH, element 1 is 2, expected 3' \
  -- "$kiln" run "$work/relu.kiln" --input "x=$work/x.npy" --expected "y=$work/y_bad.npy"
expect run-output-file 0 "wrote $work/out.npz" \
  -- "$kiln" run "$work/relu.kiln" --input "x=$work/x.npy" --output "$work/out.npz"
expect run-unknown-input 1 "no input named 'z'" -- "$kiln" run "$work/relu.kiln" --input "z=$work/x.npy"
expect run-bad-tensor-file 1 'expected a .npy or .pb' -- "$kiln" run "$work/relu.kiln" --input "x=$example"
expect run-shape-on-ir 1 'applies to ONNX models only' -- "$kiln" run "$work/relu.kiln" --shape x=2
expect run-bad-shape 1 "expected dimensions like 1x128" \
  -- "$kiln" run "$work/relu.kiln" --shape x=2xq
printf 'not a model' >"$work/garbage.onnx"
expect run-garbage-onnx 1 'garbage.onnx: not a valid ONNX model' -- "$kiln" run "$work/garbage.onnx"

# Graph passes by name.
printf 'graph @g(%%x: f32[4]) {\n  %%a = exp(%%x) : f32[4]\n  %%b = exp(%%x) : f32[4]\n  %%c = add(%%a, %%b) : f32[4]\n  %%dead = neg(%%c) : f32[4]\n  return %%c\n}\n' >"$work/dup.kiln"
expect opt-cse-dce 0 '%c = add\(%a, %a\)' -- "$kiln" opt "$work/dup.kiln" --passes cse,dce
expect opt-removes-dead 0 '^graph' -- bash -c "! '$kiln' opt '$work/dup.kiln' --passes cse,dce | grep -q dead && echo graph"
expect opt-time-passes 0 'pass cse .* ms  changed' -- env KILN_TIME_PASSES=1 "$kiln" opt "$work/dup.kiln" --passes cse
expect opt-dump-after 0 '// after pass dce' -- env KILN_DUMP_AFTER=dce "$kiln" opt "$work/dup.kiln" --passes dce,cse
# Loop passes on loop IR text: what kiln compile and --dump-after write reads back.
"$kiln" compile "$example" -o "$work/loop-ir" --fusion off >/dev/null
expect opt-loop-reads-kernels-loop 0 '^kernel kernel\(' -- "$kiln" opt "$work/loop-ir/kernels.loop" --passes verify
"$kiln" run "$example" --fusion off --dump-after lower --stop-after lower 2>"$work/lowered.loop" >/dev/null
expect opt-loop-schedules-a-dump 0 'vectorized for' -- "$kiln" opt "$work/lowered.loop" --passes schedule
expect opt-loop-unknown-pass 1 "unknown loop pass 'fuse'" -- "$kiln" opt "$work/lowered.loop" --passes fuse
expect opt-unknown-pass 1 "unknown pass 'foo'" -- "$kiln" opt "$work/dup.kiln" --passes cse,foo
expect opt-empty-pass 1 'empty pass name' -- "$kiln" opt "$work/dup.kiln" --passes cse,,dce

# Export to ONNX and back: the round trip computes the same outputs from the same inputs (up
# to the f32 rounding of the saved outputs).
expect export-example 0 "wrote $work/enc.onnx: graph @encoder_layer: 13 inputs" \
  -- "$kiln" export "$example" -o "$work/enc.onnx"
"$kiln" run "$example" --output "$work/enc_out.npz" >/dev/null
expect export-round-trip 0 'within tolerance' \
  -- "$kiln" run "$work/enc.onnx" --expected "$work/enc_out.npz" --atol 1e-6 --rtol 1e-6
expect export-unwritable 1 'cannot open for writing' \
  -- "$kiln" export "$example" -o "$work/no/such/dir/enc.onnx"
expect export-needs-output 2 'output is required' -- "$kiln" export "$example"

onnx_tests=$source_dir/../shared/onnx-node-tests/node
if [[ -d $onnx_tests/test_add ]]; then
  data=$onnx_tests/test_add/test_data_set_0
  expect run-onnx 0 'max abs error 0, .*within tolerance' -- "$kiln" run "$onnx_tests/test_add/model.onnx" \
    --input "x=$data/input_0.pb" --input "y=$data/input_1.pb" --expected "sum=$data/output_0.pb"
  expect run-onnx-shape-conflict 1 'the model fixes it to 5' \
    -- "$kiln" run "$onnx_tests/test_add/model.onnx" --shape x=3x4x6
  expect conformance-filter 0 'conformance: [0-9]+ passed, 0 failed, 0 unsupported' \
    -- "$kiln" conformance "$onnx_tests" --filter test_add_bcast
  expect conformance-unsupported 0 "unsupported +test_acos: .*unsupported operator 'Acos'" \
    -- "$kiln" conformance -v "$onnx_tests" --filter test_acos
  expect conformance-compiled 0 'conformance: [0-9]+ passed, 0 failed, 0 unsupported' \
    -- "$kiln" conformance "$onnx_tests" --filter test_conv_with_strides --compiled
fi
expect conformance-not-a-directory 1 'not a directory' -- "$kiln" conformance "$work/nothing"

# kiln zoo: the preset list, graphs in IR text, ONNX export (which imports back), weight dumps.
expect zoo-list 0 'bert-base +109,512,762 .*resnet-50 +25,557,032' -- bash -c "'$kiln' zoo | tr '\n' ' '"
expect zoo-show 0 '%loss = cross_entropy\(%logits, %labels\)' -- "$kiln" zoo show mlp-tiny
expect zoo-show-inputs 0 '^// mlp-tiny: data inputs %x, %labels; the other 6 inputs' -- "$kiln" zoo show mlp-tiny
expect zoo-show-inference 0 '^graph @bert_tiny_inference\(%tokens: i64\[1,4\]' \
  -- "$kiln" zoo show bert-tiny --inference --batch 1 --seq-len 4
expect zoo-show-train 0 'bert-tiny training step \(adam\)' -- "$kiln" zoo show bert-tiny --train
expect zoo-show-train-sgd 0 '%layer0.w.momentum.next' -- "$kiln" zoo show mlp-tiny --train --optimizer sgd
expect zoo-show-train-grads 0 '%layer0.w.grad' -- "$kiln" zoo show mlp-tiny --train --optimizer none
expect zoo-show-bad-optimizer 2 'optimizer' -- "$kiln" zoo show mlp-tiny --train --optimizer rmsprop
expect zoo-unknown 1 "unknown model 'nope'; the zoo has mlp-tiny" -- "$kiln" zoo show nope
expect zoo-bad-size 1 'vit-tiny: image_size 40 is not a multiple of the patch size 16' \
  -- "$kiln" zoo show vit-tiny --image-size 40
expect zoo-zero-batch 2 'batch' -- "$kiln" zoo show mlp-tiny --batch 0
expect zoo-export 0 "wrote $work/gcn.onnx: gcn-tiny inference graph, 340 parameters" \
  -- "$kiln" zoo export gcn-tiny -o "$work/gcn.onnx"
expect zoo-export-imports 0 '%adjacency: f32\[32,32\], %features: f32\[32,16\]' \
  -- bash -c "'$kiln' print '$work/gcn.onnx' | grep '^graph'"
expect zoo-dump 0 "wrote $work/mlp.npz: mlp-tiny loss-graph inputs and outputs; loss [0-9.]+" \
  -- "$kiln" zoo dump mlp-tiny -o "$work/mlp.npz"
# kiln zoo bench: the protocol bench/peers drives (compile, "ready", then "seconds" per count).
expect zoo-bench 0 '^seconds [0-9.]+ [0-9.]+ [0-9.]+$' \
  -- bash -c "printf '2\\n3\\n' | '$kiln' zoo bench mlp-tiny --train -o '$work/bench.npz'"
expect zoo-bench-writes-step 0 'output/layer0.w.next' -- python3 -m zipfile -l "$work/bench.npz"
expect zoo-bench-bad-count 1 "expected a positive run count, read 'many'" \
  -- bash -c "echo many | '$kiln' zoo bench mlp-tiny -o '$work/bench.npz'"
# kiln zoo run / compile: a preset compiled, checked kernel by kernel, timed; its code written.
expect zoo-run-train 0 'check: all [0-9]+ kernels agree with the reference' \
  -- "$kiln" zoo run mlp-tiny --train --check
expect zoo-run-inference 0 'output %logits f32\[' -- "$kiln" zoo run mlp-tiny --inference --repeat 2
expect zoo-run-profile 0 'share +kernel' -- "$kiln" zoo run mlp-tiny --profile
expect zoo-compile 0 'mlp-tiny loss graph: 9 nodes' -- "$kiln" zoo compile mlp-tiny -o "$work/zoo-compiled"
expect zoo-compile-writes 0 'kernel 0: matmul' -- cat "$work/zoo-compiled/plan.txt"
expect zoo-run-unknown 1 "unknown model 'nope'" -- "$kiln" zoo run nope
expect zoo-compare 0 'ilp +[0-9]+ .* ok \(' -- "$kiln" zoo compare mlp-tiny --train --check --repeat 2
expect zoo-compare-ablate-profile 2 'excludes' -- "$kiln" zoo compare mlp-tiny --ablate-rewrites --profile
expect zoo-compare-ablate 0 'all but eliminate-reductions +[0-9]+ .* ok \(' -- "$kiln" zoo compare mlp-tiny --train --check --repeat 1 --ablate-rewrites
expect zoo-compare-ablate-loss 0 'all but eliminate-loss +[0-9]+ .* ok \(' -- "$kiln" zoo compare mlp-tiny --train --check --repeat 1 --ablate-rewrites
expect zoo-compile-without-loss 0 'mlp-tiny training step \(adam, without the loss\)' \
  -- "$kiln" zoo compile mlp-tiny --train --without-loss
expect zoo-without-loss-needs-train 2 'requires --train' -- "$kiln" zoo compile mlp-tiny --without-loss
# kiln zoo train: a loop of steps, the loss every N of them, the others without it.
expect zoo-train 0 'step 4  loss [0-9.]+' -- "$kiln" zoo train mlp-tiny --steps 4 --loss-every 2
expect zoo-train-eliminates 0 'loss elimination: the steps that do not log the loss run 1 node fewer' \
  -- "$kiln" zoo train mlp-tiny --steps 2
expect zoo-train-no-elimination 0 'loss elimination off: every step computes the loss' \
  -- "$kiln" zoo train mlp-tiny --steps 2 --no-loss-elimination
expect zoo-train-no-optimizer 2 'optimizer' -- "$kiln" zoo train mlp-tiny --optimizer none
expect zoo-train-zero-steps 2 'steps' -- "$kiln" zoo train mlp-tiny --steps 0
expect zoo-explain 0 'fusion greedy: [0-9]+ nodes in [0-9]+ kernels' \
  -- "$kiln" zoo explain mlp-tiny --train --fusion greedy

# The compilation cache serves run, bench and zoo train by default, under a key that nothing a
# run measures enters: a second cache holding the first's compilations, with this machine's
# device profile measured otherwise (or not yet measured, when the first run found the machine
# busy and kept its measurement to itself), loads the training step instead of compiling it.
first_cache=$work/cache-first
second_cache=$work/cache-second
expect cache-first-run-compiles 0 '^fusion ilp: ' \
  -- env -u KILN_DEVICE_PROFILE KILN_CACHE_DIR="$first_cache" "$kiln" run zoo:mlp-tiny --train
cp -r "$first_cache" "$second_cache"
for profile in "$second_cache"/device/*.json; do
  [[ -e $profile ]] && sed -i 's/"matmul_flops": [0-9.e+]*/"matmul_flops": 1.0e9/' "$profile"
done
expect cache-second-run-loads 0 '^loaded from the compilation cache: ' \
  -- env -u KILN_DEVICE_PROFILE KILN_CACHE_DIR="$second_cache" "$kiln" run zoo:mlp-tiny --train
expect cache-refused-compiles 0 '^fusion ilp: ' -- env -u KILN_DEVICE_PROFILE \
  KILN_CACHE_DIR="$second_cache" "$kiln" run zoo:mlp-tiny --train --no-reuse-compilations
expect cache-watched-stages-compile 0 '^stage partition +[0-9.]+ ms' -- env -u KILN_DEVICE_PROFILE \
  KILN_CACHE_DIR="$second_cache" "$kiln" run zoo:mlp-tiny --train --time-stages

# A model source is a file or zoo:NAME: the zoo's run, compile, explain and bench are the
# top-level commands on a preset; options of one kind of source are refused on the other.
expect run-zoo-source 0 'check: all [0-9]+ kernels agree with the reference' \
  -- "$kiln" run zoo:mlp-tiny --train --check
expect run-zoo-source-output 0 'output %loss f32\[\]' -- "$kiln" run zoo:mlp-tiny
expect compile-zoo-source 0 "wrote $work/zoo-source/kernels.cc, kernels.loop, plan.txt" \
  -- "$kiln" compile zoo:mlp-tiny --inference -o "$work/zoo-source"
expect explain-zoo-source 0 'fusion greedy: [0-9]+ nodes in [0-9]+ kernels' \
  -- "$kiln" explain zoo:mlp-tiny --train --fusion greedy
expect bench-zoo-source 0 '^seconds [0-9.]+$' \
  -- bash -c "echo 1 | '$kiln' bench zoo:mlp-tiny -o '$work/bench-source.npz'"
expect bench-file 0 '^seconds [0-9.]+ [0-9.]+$' \
  -- bash -c "echo 2 | '$kiln' bench '$example' -o '$work/bench-file.npz'"
expect run-file-zoo-option 1 '--batch applies to zoo presets \(zoo:NAME\)' \
  -- "$kiln" run "$example" --batch 2
expect run-file-train 1 '--train applies to zoo presets' -- "$kiln" run "$example" --train
expect run-zoo-shape 1 '--shape applies to ONNX models' -- "$kiln" run zoo:mlp-tiny --shape x=1
expect run-zoo-input 1 '--input applies to model files' \
  -- "$kiln" run zoo:mlp-tiny --input "x=$work/x.npy"
expect run-zoo-unknown 1 "unknown model 'nope'" -- "$kiln" run zoo:nope
# A run that cannot fit in the memory free here stops before allocating, saying what it needs.
needs='the run needs [0-9.]+ [GTP]iB \(inputs .*, outputs .*\)'
expect run-does-not-fit 1 "$needs and this machine has [0-9.]+ [KMGT]?i?B available" \
  -- "$kiln" run zoo:mlp-tiny --batch 100000000000

# The compiler pipeline: every stage timed, dumped or stopped after, from any compiling command.
# The stages as compiler/options.h lists them (KILN_STAGES), the one list of them.
stages=$(sed -n 's/^ *X([a-z_]*, "\([a-z-]*\)").*/\1/p' "$source_dir/src/compiler/options.h")
[[ $(wc -w <<<"$stages") -ge 13 ]] || { echo "FAIL: no stages read from options.h"; exit 1; }
for stage in $stages; do
  expect "time-stages-$stage" 0 "^stage $stage +[0-9.]+ ms" -- "$kiln" run "$example" --time-stages
done
expect dump-after-partition 0 '^// after stage partition' -- "$kiln" run "$example" --dump-after partition
expect dump-after-lower-is-loop-ir 0 '^kernel kernel\(' \
  -- "$kiln" compile "$example" -o "$work/dumped" --dump-after lower
expect dump-after-codegen 0 'extern "C" void kiln_kernel_0' \
  -- "$kiln" compile "$example" -o "$work/dumped" --dump-after codegen
expect dump-after-all 0 '^// after stage plan-memory' -- "$kiln" run "$example" --dump-after all
expect dump-after-unknown 2 'dump-after' -- "$kiln" run "$example" --dump-after lowering
expect stop-after-partition 0 '^fusion ilp: 25 nodes in [0-9]+ kernels' \
  -- "$kiln" run "$example" --stop-after partition --no-substitute
expect stop-after-writes-nothing 0 '^0$' -- bash -c "'$kiln' compile '$example' -o '$work/stopped' \
  --stop-after lower >/dev/null; ls '$work/stopped' 2>/dev/null | wc -l"
expect stop-after-verify 0 '^mlp-tiny loss graph: 9 nodes$' -- "$kiln" zoo compile mlp-tiny --stop-after verify
expect explain-runs-to-dumped-stage 0 '^// after stage schedule' \
  -- "$kiln" explain "$example" --dump-after schedule
expect stop-after-unknown 2 'stop-after' -- "$kiln" compile "$example" -o "$work/x" --stop-after end

# The substitution search in a compile, on frozen weights: both layers' Q, K and V projections
# merged, and the result still agrees with the reference. --freeze is for inference graphs.
expect zoo-substitute 0 'substitutions: 4 rewrites in 2 steps by [0-9]+ proved rules' \
  -- "$kiln" zoo explain bert-tiny --inference --freeze
# KILN_DEVICE_PROFILE (this script runs with "reference"): a profile file that is missing or
# not a profile is a user error that names the variable.
echo '{"cpu": "x"}' > "$work/bad-profile.json"
expect device-profile-missing 1 'KILN_DEVICE_PROFILE=.*missing.json' -- \
  env KILN_DEVICE_PROFILE="$work/missing.json" "$kiln" zoo explain mlp-tiny --inference
expect device-profile-invalid 1 'KILN_DEVICE_PROFILE=.*bad-profile.json' -- \
  env KILN_DEVICE_PROFILE="$work/bad-profile.json" "$kiln" zoo explain mlp-tiny --inference
# A file's profile is the one priced with: a kernel call of 1 s makes mlp-tiny's 3 kernels 3 s
# (6.39 us at the reference profile).
cat > "$work/profile.json" <<'JSON'
{"cpu": "test", "cores": 2, "matmul_flops": 3.4e11, "vector_flops": 4e10,
 "memory_bandwidth": 2.6e10, "l2_bytes": 2097152, "llc_bytes": 33554432, "kernel_overhead": 1.0}
JSON
expect device-profile-file 0 '^fusion ilp: 8 nodes in 3 kernels; estimated 3000000\.[0-9]+ us' -- \
  env KILN_DEVICE_PROFILE="$work/profile.json" "$kiln" zoo explain mlp-tiny --inference
expect zoo-no-substitute 0 '^fusion ilp: [0-9]+ nodes in 27 kernels' \
  -- "$kiln" zoo explain bert-tiny --inference --freeze --no-substitute
expect zoo-substitute-checks 0 'check: all [0-9]+ kernels agree' \
  -- "$kiln" zoo run bert-tiny --inference --freeze --substitute --check
expect zoo-compare-substitution 0 '^substitution +[0-9]+ ' \
  -- "$kiln" zoo compare mlp-tiny --inference --freeze --ablate-substitution --repeat 1
expect zoo-freeze-needs-inference 2 '--train excludes --freeze' -- "$kiln" zoo compile mlp-tiny --train --freeze
"$kiln" zoo export mlp-tiny -o "$work/mlp.onnx" >/dev/null
# A model file's weights are constants by default; --weights-as-inputs keeps them inputs, and
# applies to files only.
expect run-onnx-frozen 0 '1 input, 0 weights' -- "$kiln" run "$work/mlp.onnx" --check
expect run-onnx-weights-as-inputs 0 '1 input, 5 weights \(inputs\)' \
  -- "$kiln" run "$work/mlp.onnx" --weights-as-inputs --check
expect weights-as-inputs-not-zoo 1 '--weights-as-inputs applies to model files' \
  -- "$kiln" run zoo:mlp-tiny --weights-as-inputs
expect weights-as-inputs-excludes-freeze 2 'excludes --weights-as-inputs' \
  -- "$kiln" run "$work/mlp.onnx" --weights-as-inputs --freeze

# Substitution rules: the shipped file agrees, a wrong rule is rejected (exit 1) with its place.
expect subst-check-shipped 0 'rules: ([0-9]+) agree, 0 rejected' -- \
  "$kiln" subst check "$source_dir/src/subst/rules/handwritten.rules"
cat > "$work/wrong.rules" <<'RULES'
rule exp-is-neg
graph @source(%a: f32[2]) {
  %x = exp(%a) : f32[2]
  return %x
}
graph @target(%a: f32[2]) {
  %x = neg(%a) : f32[2]
  return %x
}
RULES
expect subst-check-wrong 1 "wrong.rules:1: rule 'exp-is-neg' is wrong" -- \
  "$kiln" subst check "$work/wrong.rules"
printf 'rule r\ngraph @s(%%a: f32[2]) {\n' > "$work/open.rules"
expect subst-check-unclosed 1 "open.rules:3:1: missing 'return' before end of input" -- \
  "$kiln" subst check "$work/open.rules"
expect subst-verify-shipped 0 'rules: ([0-9]+) proved, 0 rejected' -- \
  "$kiln" subst verify "$source_dir/src/subst/rules/handwritten.rules"
expect subst-verify-wrong 1 "exp-is-neg: rejected: .*wrong.rules:1: rule 'exp-is-neg' does not hold" -- \
  "$kiln" subst verify "$work/wrong.rules"
expect subst-verify-counts-refuted 1 '1 rule: 0 proved, 1 rejected: 1 refuted, 0 undecided' -- \
  "$kiln" subst verify "$work/wrong.rules"
expect subst-verify-bad-extent 2 'max-extent' -- "$kiln" subst verify --max-extent 0 "$work/wrong.rules"
cat > "$work/tm.kiln" <<'IR'
graph @tm(%a: f32[64,128], %b: f32[128,96]) {
  %m = matmul(%a, %b) : f32[64,96]
  %t = transpose(%m) {perm = [1, 0]} : f32[96,64]
  return %t
}
IR
expect subst-search-finds-rewrite 0 'transpose-of-matmul: .* -> ' -- \
  "$kiln" subst search "$source_dir/src/subst/rules/handwritten.rules" "$work/tm.kiln"
expect subst-search-keeps-output-name 0 '%t = matmul\(%b, %a\)' -- \
  "$kiln" subst search --print "$source_dir/src/subst/rules/handwritten.rules" "$work/tm.kiln"
expect subst-search-leaves-out-unproved 0 "left out: .*exp-is-neg" -- \
  "$kiln" subst search "$work/wrong.rules" "$work/tm.kiln"
expect subst-generate 0 'enumerated 42 distinct graphs of up to 1 ops over 2 variables' -- \
  "$kiln" subst generate --max-ops 1 -o "$work/generated.rules"
expect subst-generate-then-verify 0 '1 rule: 1 proved, 0 rejected' -- \
  "$kiln" subst verify "$work/generated.rules"
expect subst-generate-needs-output 2 'output is required' -- "$kiln" subst generate
expect subst-needs-subcommand 2 'subcommand is required' -- "$kiln" subst

# Usage errors: exit 2.
expect no-subcommand 2 'subcommand is required' -- "$kiln"
expect unknown-option 2 'nope' -- "$kiln" check --nope "$example"
expect missing-argument 2 'file is required' -- "$kiln" check
expect bad-int-range 2 'int-range' -- "$kiln" check --int-range 0 "$example"

# Help on the program and every subcommand.
expect help 0 'Subcommands:' -- "$kiln" --help
for subcommand in check print opt ops run compile explain bench export conformance zoo subst; do
  expect "help-$subcommand" 0 "Usage: .*$subcommand" -- "$kiln" "$subcommand" --help
done

for subcommand in show run compile compare train explain export dump bench; do
  expect "help-zoo-$subcommand" 0 "Usage: .*zoo $subcommand" -- "$kiln" zoo "$subcommand" --help
done
expect help-subst-check 0 'Usage: .*subst check' -- "$kiln" subst check --help
expect help-subst-verify 0 'Usage: .*subst verify' -- "$kiln" subst verify --help
expect help-subst-search 0 'Usage: .*subst search' -- "$kiln" subst search --help
expect help-subst-generate 0 'Usage: .*subst generate' -- "$kiln" subst generate --help

echo "cli: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
