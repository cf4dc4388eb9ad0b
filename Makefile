# Kiln's two everyday commands, and the builds behind them.
#
#   make demo        install dependencies, build, compile the zoo's bert-tiny training step
#                    unfused, fused greedily and fused by the ILP, check every kernel of each
#                    against the reference, and time each
#   make test        install dependencies, build, run the test suite (minutes); with the
#                    Python package's environment (.venv, made by `make python`), its tests too
#   make python      the Python package `kiln` (torch.compile backend) installed into .venv,
#                    with the pinned PyTorch of python/requirements.txt from PyPI (several GB)
#   make test-python make python, then the package's tests (tests/python, pytest)
#   make test-asan   the same tests in an AddressSanitizer + UndefinedBehaviorSanitizer build
#   make bench       build and run the benchmarks in bench/ (elementwise bandwidth, matmul)
#                    and the fusion table and graph-rewrite ablation over five zoo models
#                    (bench/zoo_fusion.sh, long)
#   make bench-peers Kiln against ONNX Runtime, PyTorch eager and torch.compile on five zoo
#                    models, inference and training step, then Kiln against ONNX Runtime on
#                    seven PyTorch exports, then Kiln's torch.compile backend against eager
#                    and Inductor on five modules' training steps (bench/peers; installs the
#                    pinned peers into .venv-peers and the package into .venv, from PyPI;
#                    long). PEERS_ARGS, EXPORTS_ARGS and BACKEND_ARGS pass options, e.g.
#                    PEERS_ARGS="--models gcn-cora,xml-cnn --quick" EXPORTS_ARGS="--quick"
#   make bench-gpu   on a machine with an NVIDIA GPU and a CUDA build of PyTorch: Kiln's training
#                    steps against PyTorch eager and torch.compile (default, reduce-overhead) on
#                    five zoo models (bench/gpu; long). GPU_BENCH_ARGS passes options, e.g.
#                    GPU_BENCH_ARGS="--models bert-base,resnet-50"
#   make rules       regenerate the generated substitution rules (src/subst/rules/generated.rules)
#                    and prove them with Z3
#   make test-models real PyTorch models (ResNet-50, ViT, BERT, ...) exported to ONNX and
#                    compared with PyTorch's own outputs (label `models`, about 10 minutes)
#
# Builds live in build/ (Release) and build-asan/ (Asan). WERROR=ON turns warnings into
# errors (CI sets it). JOBS sets build and test parallelism (default: all cores).

BUILD_DIR ?= build
ASAN_BUILD_DIR ?= build-asan
WERROR ?= OFF
JOBS ?= $(shell nproc)
DEMO_MODEL ?= bert-tiny

KILN := $(BUILD_DIR)/tools/kiln/kiln

PEERS_VENV ?= .venv-peers
PYTHON_VENV ?= .venv
PEERS_ARGS ?=
BACKEND_ARGS ?=
GPU_BENCH_ARGS ?=

.PHONY: all deps build build-asan demo test test-asan test-models python test-python bench \
        bench-peers bench-gpu rules clean

all: build

deps:
	@scripts/install-deps

# Configuring is cheap when nothing changed, so every build re-runs it: a changed WERROR or a
# new source file is always picked up.
build: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=$(WERROR) \
	  > $(BUILD_DIR).configure.log || { cat $(BUILD_DIR).configure.log; exit 1; }
	@cmake --build $(BUILD_DIR) -j $(JOBS)

build-asan: deps
	@cmake -S . -B $(ASAN_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Asan -DKILN_WERROR=$(WERROR) \
	  > $(ASAN_BUILD_DIR).configure.log || { cat $(ASAN_BUILD_DIR).configure.log; exit 1; }
	@cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)

demo: build
	$(KILN) zoo compare $(DEMO_MODEL) --train --check --repeat 10

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE models
	@if [ -x $(PYTHON_VENV)/bin/python ]; then $(MAKE) --no-print-directory test-python; \
	 else echo "test: no $(PYTHON_VENV), so no Python tests (make python makes it)"; fi

# The package builds in build/python (kept between installs) from the same sources, its
# libraries position-independent; pip uses the environment's own build tools.
python: deps
	@scripts/setup-venv $(PYTHON_VENV) python/requirements.txt
	$(PYTHON_VENV)/bin/pip install --quiet --no-build-isolation --disable-pip-version-check \
	  -Ccmake.define.KILN_WERROR=$(WERROR) .

test-python: python
	cd tests/python && $(abspath $(PYTHON_VENV))/bin/python -m pytest -q

test-asan: build-asan
	cd $(ASAN_BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE models

# The model tests run big convolutions in the fp64 reference interpreter, so they run one at
# a time: two at once would only fight over the cores and memory.
test-models: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j 1 -L models

# Peers run from a project-local virtual environment, so nothing is installed system-wide; the
# results go to bench/results/ (peers.md, peers.json, peers.png).
bench-peers: build python
	scripts/setup-venv $(PEERS_VENV) bench/peers/requirements.txt
	$(PEERS_VENV)/bin/python bench/peers/bench_peers.py --kiln $(KILN) $(PEERS_ARGS)
	$(PEERS_VENV)/bin/python bench/peers/bench_exports.py --kiln $(KILN) $(EXPORTS_ARGS)
	$(PEERS_VENV)/bin/python bench/peers/check_old_opsets.py --kiln $(KILN)
	$(PEERS_VENV)/bin/python bench/peers/gemm_rates.py --kiln $(KILN)
	$(PYTHON_VENV)/bin/python bench/peers/bench_backend.py $(BACKEND_ARGS)

# The GPU's peers are the machine's own PyTorch (with CUDA), not the pinned CPU build of
# bench-peers; the results go to bench/results/ (gpu.md, gpu.json).
bench-gpu: build
	python3 bench/gpu/bench_gpu.py --kiln $(KILN) $(GPU_BENCH_ARGS)

# The generator's rules, written where the tests expect them (a test fails when the file is
# not what the generator writes), then proved.
rules: build
	$(KILN) subst generate --max-ops 2 --variables 2 -o src/subst/rules/generated.rules
	$(KILN) subst verify src/subst/rules/generated.rules

# Benchmarks time the machine they run on; they are never part of `make test`.
bench: build
	$(BUILD_DIR)/bench/kiln_elementwise_bench
	$(BUILD_DIR)/bench/kiln_matmul_bench --benchmark_repetitions=5 \
	  --benchmark_report_aggregates_only=true
	bench/zoo_fusion.sh $(KILN)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_BUILD_DIR) $(BUILD_DIR).configure.log $(ASAN_BUILD_DIR).configure.log
