// The IR text form: how graphs are printed for people, golden tests and `kiln` commands.
//
//   graph @ffn(%x: f32[8,64], %w: f32[64,256]) {
//     %0 = matmul(%x, %w) : f32[8,256]
//     %h = gelu(%0) {approximate = "tanh"} : f32[8,256]
//     %a, %b = split(%h) {axis = 1, sizes = [128, 128]} : f32[8,128], f32[8,128]
//     return %a, %b
//   }
//
// Nodes print in graph order; attributes print in schema order and only where they differ
// from the schema's default. Floats print in the shortest form that reads back to the same
// double, so parse(print(g)) prints identically. Names that are not plain identifiers
// ([A-Za-z0-9_.]) print quoted: %"encoder/layer.0:out". The grammar is in ir/parser.h.
#pragma once

#include <string>

#include "ir/graph.h"

namespace kiln {

struct PrintOptions {
  // Tensor attributes (constants) print as their type and the address of their value, which a
  // graph's clones share, instead of their elements: cheap for frozen weights, and enough to
  // tell graphs apart within one process (the substitution search's seen-set, subst/search.h).
  // Such text does not read back.
  bool tensors_by_identity = false;
  // Print the graph's name as "_": for keys a graph's name must not change (what the
  // compilation cache compiles does not depend on it). Such text still reads back.
  bool anonymous = false;
};

std::string print_graph(const Graph& graph, const PrintOptions& options = {});
// One node as its statement line, without indentation or newline.
std::string print_node(const Node& node, const PrintOptions& options = {});
std::string print_attr_value(const AttrValue& value, const PrintOptions& options = {});
// "%name", quoted when needed.
std::string print_value_ref(const Value& value);

}  // namespace kiln
