// kiln-prove-rules: run by the build. Proves the rules of the given rule files with Z3
// (subst/prove.h) and writes a C++ source holding the proved ones as rule text and the rest as
// "NAME: why" lines, for subst/shipped_rules.h. A rule that does not prove is left out, not an
// error: the unit tests prove the shipped files and fail on it. An unreadable file or a false
// axiom is an error (exit 1).
//
//   kiln-prove-rules OUTPUT.cc RULES...
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "subst/generate.h"
#include "subst/prove.h"
#include "subst/rule.h"
#include "support/files.h"

namespace {

// A raw string literal whose delimiter cannot occur in rule text (IR text has no ')kiln').
std::string raw_literal(std::string_view text) { return fmt::format("R\"kiln({})kiln\"", text); }

int prove_and_write(const std::string& output, const std::vector<std::string>& files) {
  using namespace kiln;
  if (Status axioms = subst::prove_axioms_numerically(); !axioms) {
    fmt::print(stderr, "kiln-prove-rules: {}\n", axioms.message());
    return 1;
  }
  std::vector<subst::Rule> proved;
  std::vector<std::string> left_out;
  for (const std::string& file : files) {
    Expected<std::vector<subst::Rule>> rules = subst::read_rules_file(file);
    if (!rules) {
      fmt::print(stderr, "kiln-prove-rules: {}\n", rules.status().message());
      return 1;
    }
    for (subst::Rule& rule : *rules) {
      if (Expected<subst::Proof> proof = subst::prove_rule(rule); proof) {
        proved.push_back(std::move(rule));
      } else {
        fmt::print(stderr, "kiln-prove-rules: left out {}\n", proof.status().message());
        left_out.push_back(fmt::format("{}: {}", rule.name, proof.status().message()));
      }
    }
  }
  std::string source = "// Written by kiln-prove-rules when Kiln was built; do not edit.\n";
  source += "#include <span>\n#include <string_view>\n\nnamespace kiln::subst {\n\n";
  source += fmt::format("extern const std::string_view kProvedRulesText = {};\n\n",
                        raw_literal(subst::print_rules(proved)));
  source += "static const std::string_view kLeftOut[] = {\n";
  for (const std::string& line : left_out) source += fmt::format("    {},\n", raw_literal(line));
  source += "    \"\"};\n";
  source += fmt::format("extern const std::span<const std::string_view> kRulesLeftOut(kLeftOut, {});\n\n",
                        left_out.size());
  source += "}  // namespace kiln::subst\n";
  if (Status written = write_file_atomically(output, source); !written) {
    fmt::print(stderr, "kiln-prove-rules: {}\n", written.message());
    return 1;
  }
  fmt::print("kiln-prove-rules: {} rules proved, {} left out\n", proved.size(), left_out.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: kiln-prove-rules OUTPUT.cc RULES...\n");
    return 2;
  }
  return prove_and_write(argv[1], std::vector<std::string>(argv + 2, argv + argc));
}
