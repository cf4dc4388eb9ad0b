// Parser for the IR text form (see ir/printer.h for an example).
//
// Grammar (`//` starts a comment that runs to the end of the line):
//   graph     := 'graph' '@' name '(' [param (',' param)*] ')' '{' statement* return '}'
//   param     := value ':' type
//   statement := value (',' value)* '=' op '(' [value (',' value)*] ')' [attrs] ':' types
//   return    := 'return' value (',' value)*
//   attrs     := '{' name '=' attr (',' name '=' attr)* '}'
//   attr      := int | float | 'true' | 'false' | string | dtype | '[' [number (',' number)*] ']'
//              | 'tensor' '<' type '>' '[' [element (',' element)*] ']'
//   type      := dtype '[' [int (',' int)*] ']'          e.g. f32[2,3], i64[]
//   value     := '%' name        name := [A-Za-z0-9_.]+ | string
// Floats are written with a '.' or exponent, or as inf, -inf, nan.
//
// Every node is built through Graph::add_node, so attributes are checked against the op's
// schema and types are inferred; the annotated result types must equal the inferred ones.
// Errors read "FILE:LINE:COL: message". The parser never crashes on any input: nesting is
// bounded by the grammar (no recursion), numbers are range-checked, and tensor literals are
// checked against their declared element count as they are read.
#pragma once

#include <cstddef>
#include <string_view>

#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

Expected<Graph> parse_graph(std::string_view text, std::string_view filename = "<input>");

// One graph read from `offset` of a text that may hold more (a rule file holds two per rule,
// subst/rule.h); on success `offset` moves just past the graph's closing brace. Positions in
// errors count from the start of `text`.
Expected<Graph> parse_graph_at(std::string_view text, size_t& offset,
                               std::string_view filename = "<input>");

}  // namespace kiln
