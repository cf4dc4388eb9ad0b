// The ATen importer: graphs of PyTorch's ATen ops, as torch.compile hands them to a backend
// after AOTAutograd (forward and backward graphs of Core ATen ops), become Kiln graphs.
//
// The graph arrives as JSON text, written by the Python package (python/kiln/_aten.py) from a
// torch.fx graph whose nodes carry FakeTensor metadata, so that no data is ever needed:
//
//   {"format": "kiln-aten-1", "name": "forward",
//    "inputs":  [{"name": "primals_1", "dtype": "f32", "shape": [8, 16]}, ...],
//    "nodes":   [{"name": "addmm", "target": "aten.addmm.default",
//                 "args": {"self": {"tensor": "primals_2"}, "mat1": ..., "beta": 1, ...},
//                 "outputs": [{"dtype": "f32", "shape": [8, 32]}]}, ...],
//    "outputs": [{"tensor": "addmm"}, {"tensor": "native_layer_norm", "index": 1}, ...]}
//
// - "args" holds every argument of the op's schema by its schema name, defaults included (the
//   Python side normalizes positional and keyword arguments against the schema).
// - An argument is a JSON number, bool, null, string or list, or an object: a tensor
//   {"tensor": NAME, "index": I} (I defaults to 0, for ops with several outputs), a dtype
//   {"dtype": "f32"}, a device {"device": "cpu"}, a float that JSON cannot spell
//   {"float": "inf" | "-inf" | "nan"}, or another kind {"other": TEXT} (layouts, memory
//   formats), which converters may only ignore.
// - "outputs" of a node gives PyTorch's dtype and shape of each result (null for a result the
//   op does not produce, as convolution_backward's masked gradients). Kiln's conversion must
//   give exactly these, or the import fails: a converter bug cannot pass silently.
//
// Random ops (native_dropout) draw from Kiln's counter-based RNG (support/counter_rng.h), each
// op from its own range of counters, all from one seed: the graph's input kAtenRngSeedInput, a
// 0-d i64 tensor after the JSON's inputs, present only when the graph has a random op. The
// caller gives a new seed at every run (the Python backend draws it from torch's generator, so
// that torch.manual_seed repeats a run), below 2^53 (the reference interpreter's exact range).
// The masks are not the ones PyTorch would draw, as no other backend's are.
//
// Each op has one converter (aten_ops.cc). A converter either reproduces ATen's semantics
// exactly or fails naming the argument value it does not support; an argument that no
// converter read is an error, so a new overload's extra argument is never dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

inline constexpr std::string_view kAtenRngSeedInput = "rng_seed";

// The Kiln graph of an ATen graph in the JSON form above: one graph input per JSON input, in
// order (then the seed input, for a graph with random ops), and one graph output per JSON
// output. Errors name the node and its ATen op.
Expected<Graph> import_aten_graph(std::string_view json_text);

// The ATen overloads the importer converts ("aten.addmm.default", ...), sorted. Whether a
// given node converts can still depend on its arguments (a transposed convolution does not);
// import the node on its own to know.
std::vector<std::string> supported_aten_ops();

}  // namespace kiln
