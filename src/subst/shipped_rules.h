// The rules Kiln's compiler searches with (subst/search.h): the shipped rule files
// (src/subst/rules/*.rules), proved with Z3 when Kiln is built. The build runs
// `kiln-prove-rules` (tools/prove_rules) over the files and compiles in only the rules it
// proves, so an unproved rule cannot be applied; the ones left out are listed with the reason.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "subst/rule.h"

namespace kiln::subst {

// The proved rules, parsed once.
std::span<const Rule> shipped_rules();

// "NAME: why" for each shipped rule the build could not prove.
std::span<const std::string_view> shipped_rules_left_out();

// The canonical rules (subst/canonicalize.h: src/subst/rules/canonical.rules), each proved by
// the build or, where the prover does not apply (a composite it has no semantics for), checked
// numerically; and "NAME: why" for each left out.
std::span<const Rule> canonical_rules();
std::span<const std::string_view> canonical_rules_left_out();

}  // namespace kiln::subst
