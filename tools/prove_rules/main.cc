// kiln-prove-rules: run by the build. Proves the rules of the given rule files with Z3
// (subst/prove.h) and writes a C++ source holding the proved ones as rule text and the rest as
// "NAME: why" lines, for subst/shipped_rules.h. A rule that does not prove is left out, not an
// error: the unit tests prove the shipped files and fail on it. An unreadable file or a false
// axiom is an error (exit 1).
//
// The files after --canonical hold the canonical rules (subst/canonicalize.h). One of those
// the prover does not prove is kept when the numeric check passes (rule.h), and reported: the
// prover has no semantics for a composite such as layer_norm, holds erf and tanh
// uninterpreted (so gelu(x) and its spelled-out form differ there), and an exporter's
// constants are f32 roundings (sqrt(2) is 1.4142135381698608), true to f32 and not over the
// reals.
//
//   kiln-prove-rules OUTPUT.cc RULES... [--canonical RULES...]
#include <cstdio>
#include <optional>
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

// The rules of `files`, read; an unreadable file is reported and ends the build step.
std::optional<std::vector<kiln::subst::Rule>> read_all(const std::vector<std::string>& files) {
  std::vector<kiln::subst::Rule> all;
  for (const std::string& file : files) {
    kiln::Expected<std::vector<kiln::subst::Rule>> rules = kiln::subst::read_rules_file(file);
    if (!rules) {
      fmt::print(stderr, "kiln-prove-rules: {}\n", rules.status().message());
      return std::nullopt;
    }
    for (kiln::subst::Rule& rule : *rules) all.push_back(std::move(rule));
  }
  return all;
}

// The rules kept, in order, and a "NAME: why" line for each left out. A canonical rule the
// prover does not prove is kept when the numeric check passes.
struct Sorted {
  std::vector<kiln::subst::Rule> kept;
  std::vector<std::string> left_out;
};

Sorted prove_each(std::vector<kiln::subst::Rule> rules, bool canonical) {
  using namespace kiln;
  Sorted sorted;
  for (subst::Rule& rule : rules) {
    Expected<subst::Proof> proof = subst::prove_rule(rule);
    Status kept = proof ? Status::ok() : proof.status();
    if (!proof && canonical) {
      kept = subst::check_rule_numerically(rule);
      if (kept) fmt::print("kiln-prove-rules: checked numerically {}\n", proof.status().message());
    }
    if (kept) {
      sorted.kept.push_back(std::move(rule));
    } else {
      fmt::print(stderr, "kiln-prove-rules: left out {}\n", kept.message());
      sorted.left_out.push_back(fmt::format("{}: {}", rule.name, kept.message()));
    }
  }
  return sorted;
}

// The C++ definitions of one set: NAME's rule text and NAME's left-out lines.
std::string definitions(const std::string& name, const Sorted& sorted) {
  std::string source = fmt::format("extern const std::string_view k{}Text = {};\n\n", name,
                                   raw_literal(kiln::subst::print_rules(sorted.kept)));
  source += fmt::format("static const std::string_view k{}LeftOutLines[] = {{\n", name);
  for (const std::string& line : sorted.left_out) {
    source += fmt::format("    {},\n", raw_literal(line));
  }
  source += "    \"\"};\n";
  source += fmt::format(
      "extern const std::span<const std::string_view> k{0}LeftOut(k{0}LeftOutLines, {1});\n\n",
      name, sorted.left_out.size());
  return source;
}

int prove_and_write(const std::string& output, const std::vector<std::string>& search_files,
                    const std::vector<std::string>& canonical_files) {
  using namespace kiln;
  if (Status axioms = subst::prove_axioms_numerically(); !axioms) {
    fmt::print(stderr, "kiln-prove-rules: {}\n", axioms.message());
    return 1;
  }
  std::optional<std::vector<subst::Rule>> search_rules = read_all(search_files);
  std::optional<std::vector<subst::Rule>> canonical_rules = read_all(canonical_files);
  if (!search_rules || !canonical_rules) return 1;
  const Sorted search = prove_each(std::move(*search_rules), /*canonical=*/false);
  const Sorted canonical = prove_each(std::move(*canonical_rules), /*canonical=*/true);
  std::string source = "// Written by kiln-prove-rules when Kiln was built; do not edit.\n";
  source += "#include <span>\n#include <string_view>\n\nnamespace kiln::subst {\n\n";
  source += definitions("ProvedRules", search);
  source += definitions("CanonicalRules", canonical);
  source += "}  // namespace kiln::subst\n";
  if (Status written = write_file_atomically(output, source); !written) {
    fmt::print(stderr, "kiln-prove-rules: {}\n", written.message());
    return 1;
  }
  fmt::print(
      "kiln-prove-rules: {} rules proved, {} left out; {} canonical rules kept, {} left out\n",
      search.kept.size(), search.left_out.size(), canonical.kept.size(), canonical.left_out.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> search_files, canonical_files;
  std::vector<std::string>* files = &search_files;
  for (int i = 2; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--canonical") {
      files = &canonical_files;
    } else {
      files->emplace_back(argv[i]);
    }
  }
  if (argc < 3 || search_files.empty()) {
    fmt::print(stderr, "usage: kiln-prove-rules OUTPUT.cc RULES... [--canonical RULES...]\n");
    return 2;
  }
  return prove_and_write(argv[1], search_files, canonical_files);
}
