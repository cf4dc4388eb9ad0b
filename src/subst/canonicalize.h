// Canonicalization: what exporters write, recognized and rewritten into Kiln's composites and
// cheaper forms before anything else looks at the graph.
//
// torch.onnx.export below opset 17 writes a layer norm as nine primitives (ReduceMean, Sub,
// Pow, ReduceMean, Add, Sqrt, Div, Mul, Add), a GELU as Div, Erf, Add, Mul, Mul, and a square
// as Pow. Kiln's composites compute these in one pass over a row; the primitives, fused, still
// take several (a BERT layer's norms took 27x the composite's time). The canonical rules
// (src/subst/rules/canonical.rules, rule.h's format) say what is recognized; each always
// pays, so they are applied wherever they match, unlike the search's rules (subst/search.h),
// which are applied where the cost model says. The build proves them where the prover can and
// checks the rest numerically (subst/shipped_rules.h).
//
// Rules apply in file order (a rule written over dtypes and ranks as its instances, in order:
// rule.h), each wherever it matches, and the whole list again while one applies (a square written
// as Pow becomes x * x, which the layer norm's rule then matches). Replaced nodes are left for
// dead-code elimination.
#pragma once

#include <map>
#include <span>
#include <string>

#include "ir/graph.h"
#include "subst/rule.h"

namespace kiln::subst {

// How often each rule applied, by name (rules that did not apply are absent).
using Recognitions = std::map<std::string, int>;

Recognitions canonicalize(Graph& graph, std::span<const Rule> rules);

}  // namespace kiln::subst
