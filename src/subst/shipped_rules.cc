#include "subst/shipped_rules.h"

#include "support/check.h"

namespace kiln::subst {

// Written by kiln-prove-rules into the build tree (proved_rules.cc).
extern const std::string_view kProvedRulesText;
extern const std::span<const std::string_view> kProvedRulesLeftOut;
extern const std::string_view kCanonicalRulesText;
extern const std::span<const std::string_view> kCanonicalRulesLeftOut;

namespace {

std::vector<Rule> parse_built_in(std::string_view text, std::string_view what) {
  Expected<std::vector<Rule>> parsed = parse_rules(text, what);
  KILN_CHECK(parsed.has_value(), "the {} do not parse: {}", what, parsed.status().message());
  return std::move(*parsed);
}

}  // namespace

std::span<const Rule> shipped_rules() {
  static const std::vector<Rule> rules = parse_built_in(kProvedRulesText, "<proved shipped rules>");
  return rules;
}

std::span<const std::string_view> shipped_rules_left_out() { return kProvedRulesLeftOut; }

std::span<const Rule> canonical_rules() {
  static const std::vector<Rule> rules = parse_built_in(kCanonicalRulesText, "<canonical rules>");
  return rules;
}

std::span<const std::string_view> canonical_rules_left_out() { return kCanonicalRulesLeftOut; }

}  // namespace kiln::subst
