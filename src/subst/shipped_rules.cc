#include "subst/shipped_rules.h"

#include "support/check.h"

namespace kiln::subst {

// Written by kiln-prove-rules into the build tree (proved_rules.cc).
extern const std::string_view kProvedRulesText;
extern const std::span<const std::string_view> kRulesLeftOut;

std::span<const Rule> shipped_rules() {
  static const std::vector<Rule> rules = [] {
    Expected<std::vector<Rule>> parsed = parse_rules(kProvedRulesText, "<proved shipped rules>");
    KILN_CHECK(parsed.has_value(), "the proved shipped rules do not parse: {}", parsed.status().message());
    return std::move(*parsed);
  }();
  return rules;
}

std::span<const std::string_view> shipped_rules_left_out() { return kRulesLeftOut; }

}  // namespace kiln::subst
