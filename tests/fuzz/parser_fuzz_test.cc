// Fuzzes the IR parser with mutations of valid texts: the printed example graphs of
// tests/common/example_graphs.h, truncated, bit-flipped, with bytes and tokens inserted, deleted,
// duplicated and swapped. Whatever the input, parse_graph must return (never crash, hang or
// trip a sanitizer); an error must be located inside the text; a graph it accepts must verify,
// round-trip through the text form, and run in the reference interpreter when it is small.
//
// Deterministic: mutations come from KILN_FUZZ_SEED (a fixed seed when unset), printed with
// every failure. The run stops after KILN_FUZZ_ITERATIONS mutants or KILN_FUZZ_SECONDS seconds,
// whichever comes first; a failure names the iteration, so replaying the same seed with enough
// iterations reproduces it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/example_graphs.h"
#include "common/round_trip_check.h"
#include "common/small_graph.h"
#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/parser.h"
#include "ir/printer.h"

namespace kiln {
namespace {

constexpr uint64_t kDefaultSeed = 20240611;
constexpr uint64_t kDefaultIterations = 1'000'000;
constexpr uint64_t kDefaultSeconds = 20;
constexpr std::string_view kFilename = "fuzz.kir";

// A non-negative number from the environment, or `fallback` when the variable is unset.
uint64_t env_or(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  return text != nullptr ? std::strtoull(text, nullptr, 10) : fallback;
}

// The printed example graphs, plus a text using what printing never produces (comments, odd
// spacing, a quoted plain name).
std::vector<std::string> corpus() {
  std::vector<std::string> texts;
  for (const testing::ExampleGraph& example : testing::example_graphs()) {
    Expected<Graph> graph = example.build();
    EXPECT_TRUE(graph.has_value()) << example.name << ": " << graph.status().message();
    if (graph) texts.push_back(print_graph(*graph));
  }
  texts.push_back(
      "// comment\ngraph @g ( %x : f32 [ 2 ] ,%\"y\" : f32[2] ) {\n"
      "\t%s=add(%x,%y):f32[2]// no spaces\n  return %s ,%x}\n");
  return texts;
}

// Whether an error message starts with "fuzz.kir:LINE:COL: " for a position inside `text`
// (one past the end of a line, or of the text, included).
::testing::AssertionResult located_inside(const std::string& message, std::string_view text) {
  int line = 0;
  int column = 0;
  const std::string prefix = std::string(kFilename) + ":";
  if (!message.starts_with(prefix) ||
      std::sscanf(message.c_str() + prefix.size(), "%d:%d: ", &line, &column) != 2) {
    return ::testing::AssertionFailure() << "error without a location: " << message;
  }
  std::vector<size_t> line_lengths = {0};
  for (char c : text) {
    if (c == '\n') {
      line_lengths.push_back(0);
    } else {
      ++line_lengths.back();
    }
  }
  if (line < 1 || line > static_cast<int>(line_lengths.size()) || column < 1 ||
      static_cast<size_t>(column) > line_lengths[static_cast<size_t>(line - 1)] + 1) {
    return ::testing::AssertionFailure() << "error located outside the text: " << message;
  }
  return ::testing::AssertionSuccess();
}

struct Outcome {
  bool parsed = false;
  bool interpreted = false;
};

// Parses `text` and checks what the parser promises about the result.
Outcome check_text(std::string_view text, uint64_t seed) {
  Outcome outcome;
  Expected<Graph> graph = parse_graph(text, kFilename);
  if (!graph) {
    EXPECT_TRUE(located_inside(graph.status().message(), text));
    return outcome;
  }
  outcome.parsed = true;
  EXPECT_TRUE(testing::round_trips(*graph));
  if (!testing::small_enough_to_interpret(*graph)) return outcome;
  InterpreterOptions options;
  options.max_live_elements = int64_t{1} << 16;
  Expected<std::vector<Array>> results =
      interpret(*graph, random_inputs(*graph, {.seed = seed}), options);
  if (!results) return outcome;  // a data-dependent error, such as an index out of range
  outcome.interpreted = true;
  EXPECT_EQ(results->size(), graph->outputs().size());
  for (size_t i = 0; i < std::min(results->size(), graph->outputs().size()); ++i) {
    EXPECT_EQ((*results)[i].type(), graph->outputs()[i]->type()) << "output " << i;
  }
  return outcome;
}

// Tokens and bytes that tend to reach the parser's corners.
std::vector<std::string> special_tokens() {
  std::vector<std::string> tokens = {
      // Punctuation, whitespace and bytes outside the grammar.
      "%", "@", "{", "}", "[", "]", "(", ")", "<", ">", ",", ":", "=", "-", "\"", "\\", "//", "\n",
      "\t", "\r", " ", "\x7F", "\xFF", "\xC3\xA9",
      // Numbers at the edges of what is accepted.
      "0", "-1", "1", "2", "99999999999999999999", "9223372036854775807", "-9223372036854775808",
      "281474976710656", "1e400", "-1e400", "1e-400", "-0.0", "0.1", "1e", "1.", "nan", "inf",
      "-inf",
      // Keywords, types and fragments of statements.
      "true", "false", "graph", "return", "tensor", "f32", "bool", "i64", "f16[]", "f32[0]",
      "tensor<f32[2]>[1.0, 2.0]", "tensor<", "[[[[[[[[", "]]]]]]]]", "{{{{", "((((", "%x", "%0",
      "%\"", "%\"\"", "@\"\"", "\"\\x", "\"\\xZZ\"", "\"\\q\"", ", %0", "= neg(", ": f32[2]",
      "\n  return %0\n}\n"};
  tokens.push_back(std::string(1, '\0'));
  tokens.push_back("%" + std::string(4096, 'n'));
  tokens.push_back("\"" + std::string(4096, 's') + "\"");
  tokens.push_back(std::string(2048, '['));
  tokens.push_back("1" + std::string(400, '0'));
  tokens.push_back("0." + std::string(400, '0') + "1");
  return tokens;
}

// Spans of "word" characters (names, numbers, keywords, sigils) and single other characters.
std::vector<std::pair<size_t, size_t>> token_spans(const std::string& text) {
  auto is_word = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '%' ||
           c == '@' || c == '-' || c == '+';
  };
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t i = 0; i < text.size();) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    if (is_word(text[i])) {
      while (end < text.size() && is_word(text[end])) ++end;
    }
    spans.emplace_back(i, end - i);
    i = end;
  }
  return spans;
}

class Mutator {
 public:
  Mutator(uint64_t seed, const std::vector<std::string>& corpus)
      : rng_(seed), corpus_(corpus), tokens_(special_tokens()) {}

  // Applies one to three random mutations; `log` says which, for a failure message.
  std::string mutate(std::string text, std::string& log) {
    const int count = static_cast<int>(below(3)) + 1;
    for (int i = 0; i < count; ++i) text = mutate_once(std::move(text), log);
    return text;
  }

 private:
  uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  size_t position(const std::string& text) { return below(text.size() + 1); }

  std::string mutate_once(std::string text, std::string& log) {
    switch (below(11)) {
      case 0: {
        const size_t at = position(text);
        log += fmt::format(" truncate@{}", at);
        return text.substr(0, at);
      }
      case 1: {
        if (text.empty()) return text;
        const size_t at = below(text.size());
        const int bit = static_cast<int>(below(8));
        log += fmt::format(" flip@{}.{}", at, bit);
        text[at] = static_cast<char>(text[at] ^ (1 << bit));
        return text;
      }
      case 2: {
        const size_t at = position(text);
        const char byte = static_cast<char>(below(256));
        log += fmt::format(" byte@{}={:02X}", at, static_cast<unsigned char>(byte));
        text.insert(at, 1, byte);
        return text;
      }
      case 3:
      case 4: {
        const size_t at = position(text);
        const size_t which = below(tokens_.size());
        log += fmt::format(" token@{}=#{}", at, which);
        text.insert(at, tokens_[which]);
        return text;
      }
      case 5: {
        const size_t at = position(text);
        const size_t length = std::min<size_t>(below(16) + 1, text.size() - at);
        log += fmt::format(" delete@{}+{}", at, length);
        text.erase(at, length);
        return text;
      }
      case 6: {
        insert_line(text, text, "dupline", log);
        return text;
      }
      case 7: {
        const size_t from = below(corpus_.size());
        insert_line(text, corpus_[from], fmt::format("splice#{}", from), log);
        return text;
      }
      case 8: return swap_tokens(std::move(text), log);
      default: return replace_token(std::move(text), log);
    }
  }

  // The line of `text` holding byte `at`, with its newline.
  static std::string line_at(const std::string& text, size_t at) {
    const size_t newline = at == 0 ? std::string::npos : text.rfind('\n', at - 1);
    const size_t start = newline == std::string::npos ? 0 : newline + 1;
    const size_t end = std::min(text.find('\n', start), text.size());
    return text.substr(start, end - start) + "\n";
  }

  // Inserts a random line of `source` (`text` itself or another corpus text) before a random
  // line of `text`: a repeated or foreign statement, parameter list or return.
  void insert_line(std::string& text, const std::string& source, std::string_view what,
                   std::string& log) {
    const std::string line = line_at(source, position(source));
    const size_t at = position(text);
    const size_t newline = at == 0 ? std::string::npos : text.rfind('\n', at - 1);
    const size_t start = newline == std::string::npos ? 0 : newline + 1;
    log += fmt::format(" {}@{}", what, start);
    text.insert(start, line);
  }

  std::string swap_tokens(std::string text, std::string& log) {
    const auto spans = token_spans(text);
    if (spans.size() < 2) return text;
    size_t i = below(spans.size());
    size_t j = below(spans.size());
    if (i == j) return text;
    if (i > j) std::swap(i, j);
    const auto [a_at, a_len] = spans[i];
    const auto [b_at, b_len] = spans[j];
    log += fmt::format(" swap@{},{}", a_at, b_at);
    const std::string a = text.substr(a_at, a_len);
    const std::string b = text.substr(b_at, b_len);
    text.replace(b_at, b_len, a);
    text.replace(a_at, a_len, b);
    return text;
  }

  // Replaces one token with a special token or with another token of the same text.
  std::string replace_token(std::string text, std::string& log) {
    const auto spans = token_spans(text);
    if (spans.empty()) return text;
    const auto [at, length] = spans[below(spans.size())];
    std::string replacement;
    if (below(2) == 0) {
      const size_t which = below(tokens_.size());
      replacement = tokens_[which];
      log += fmt::format(" replace@{}=#{}", at, which);
    } else {
      const auto [from, from_length] = spans[below(spans.size())];
      replacement = text.substr(from, from_length);
      log += fmt::format(" replace@{}=@{}", at, from);
    }
    text.replace(at, length, replacement);
    return text;
  }

  std::mt19937_64 rng_;
  const std::vector<std::string>& corpus_;
  std::vector<std::string> tokens_;
};

TEST(ParserFuzz, EveryPrefixOfAValidTextFailsCleanlyUnlessItHoldsTheWholeGraph) {
  for (const std::string& text : corpus()) {
    const size_t complete = text.rfind('}') + 1;
    for (size_t length = 0; length <= text.size(); ++length) {
      const std::string_view prefix = std::string_view(text).substr(0, length);
      SCOPED_TRACE(::testing::Message() << "prefix of length " << length << " of\n" << text);
      EXPECT_EQ(check_text(prefix, 0).parsed, length >= complete);
      if (HasFailure()) return;
    }
  }
}

TEST(ParserFuzz, MutatedTextsFailCleanlyOrParseToValidGraphs) {
  const uint64_t seed = env_or("KILN_FUZZ_SEED", kDefaultSeed);
  const uint64_t iterations = env_or("KILN_FUZZ_ITERATIONS", kDefaultIterations);
  const std::chrono::seconds budget(env_or("KILN_FUZZ_SECONDS", kDefaultSeconds));
  const std::vector<std::string> texts = corpus();
  ASSERT_FALSE(texts.empty());

  // Printed first, so that a crash can be replayed too.
  std::printf("[ fuzz     ] KILN_FUZZ_SEED=%llu\n", static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  Mutator mutator(seed, texts);
  std::mt19937_64 pick(seed ^ 0x9E3779B97F4A7C15u);
  const auto start = std::chrono::steady_clock::now();
  uint64_t done = 0;
  uint64_t parsed = 0;
  uint64_t interpreted = 0;
  for (; done < iterations && std::chrono::steady_clock::now() - start < budget; ++done) {
    const size_t source = pick() % texts.size();
    std::string log;
    const std::string mutant = mutator.mutate(texts[source], log);
    const Outcome outcome = check_text(mutant, seed + done);
    parsed += outcome.parsed;
    interpreted += outcome.interpreted;
    if (HasFailure()) {
      ADD_FAILURE() << "replay with KILN_FUZZ_SEED=" << seed << ": iteration " << done
                    << ", corpus text " << source << ", mutations" << log << ", giving "
                    << ::testing::PrintToString(mutant);
      break;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ fuzz     ] %llu mutants in %.1f s: %llu parsed, %llu interpreted\n",
              static_cast<unsigned long long>(done), seconds,
              static_cast<unsigned long long>(parsed),
              static_cast<unsigned long long>(interpreted));
  // Mutations that keep the text valid must occur, or the checks on parsed graphs never run.
  EXPECT_GT(parsed, 0u) << "seed " << seed;
}

}  // namespace
}  // namespace kiln
