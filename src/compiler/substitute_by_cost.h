// Substitution by cost, the pipeline's substitute stage: TASO's search (subst/search.h) over the
// shipped rules the build proved (subst/shipped_rules.h), each candidate graph priced by what it
// costs after fusion: the rewrite pipeline runs on a copy (so a concatenation of frozen weights
// that a rule introduces folds into a constant, passes/freeze_inputs.h), then the partitioner
// estimates it with the compile's fusion options. The best graph found replaces `graph`, and
// the pipeline runs on it again.
#pragma once

#include "compiler/compiled_graph.h"
#include "compiler/options.h"
#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

Expected<SubstitutionSummary> substitute_by_cost(Graph& graph, const CompileOptions& options);

}  // namespace kiln
