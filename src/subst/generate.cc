#include "subst/generate.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/printer.h"

namespace kiln::subst {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// sum_rows and sum_columns reduce one axis keeping it (x [m, n] -> [1, n] and [m, 1]); double
// multiplies by the constant 2 (the scalar multiply).
enum class Kind { neg, relu, transpose, sum_rows, sum_columns, twice, add, mul, matmul };
constexpr Kind kKinds[] = {Kind::neg,        Kind::relu,  Kind::transpose, Kind::sum_rows,
                           Kind::sum_columns, Kind::twice, Kind::add,       Kind::mul,
                           Kind::matmul};

bool is_binary(Kind kind) { return kind == Kind::add || kind == Kind::mul || kind == Kind::matmul; }

std::string_view kind_name(Kind kind) {
  switch (kind) {
    case Kind::neg: return "neg";
    case Kind::relu: return "relu";
    case Kind::transpose: return "transpose";
    case Kind::sum_rows: return "sumrows";
    case Kind::sum_columns: return "sumcolumns";
    case Kind::twice: return "twice";
    case Kind::add: return "add";
    case Kind::mul: return "mul";
    case Kind::matmul: return "matmul";
  }
  return "?";
}

// An op of an enumerated graph. Operand o < variables is variable o; otherwise it is the
// result of term o - variables.
struct Term {
  Kind kind;
  int a = 0;
  int b = 0;
};

struct Candidate {
  std::vector<Term> terms;  // the last is the result
  int variables = 0;
  int variable = -1;        // with no terms: the variable that is the result

  int output() const {
    return terms.empty() ? variable : variables + static_cast<int>(terms.size()) - 1;
  }

  // The expression's text, with the operands of add and mul in sorted order: the matcher tries
  // both orders (subst/match.h), so graphs that differ only there are one graph.
  std::string expression(int operand) const {
    if (operand < variables) return fmt::format("x{}", operand);
    const Term& term = terms[static_cast<size_t>(operand - variables)];
    if (!is_binary(term.kind)) return fmt::format("{}({})", kind_name(term.kind), expression(term.a));
    std::string a = expression(term.a);
    std::string b = expression(term.b);
    if ((term.kind == Kind::add || term.kind == Kind::mul) && b < a) std::swap(a, b);
    return fmt::format("{}({},{})", kind_name(term.kind), a, b);
  }
  std::string expression() const { return expression(output()); }

  // The variables the result reads, in order of first use.
  std::vector<int> used_variables() const {
    std::vector<int> used;
    const std::function<void(int)> visit = [&](int operand) {
      if (operand < variables) {
        if (std::find(used.begin(), used.end(), operand) == used.end()) used.push_back(operand);
        return;
      }
      const Term& term = terms[static_cast<size_t>(operand - variables)];
      visit(term.a);
      if (is_binary(term.kind)) visit(term.b);
    };
    visit(output());
    return used;
  }

  // The candidate computing `operand` alone: its terms restricted to those it reads.
  Candidate subexpression(int operand) const {
    Candidate sub{{}, variables, operand < variables ? operand : -1};
    std::map<int, int> renumbered;
    const std::function<int(int)> copy = [&](int o) -> int {
      if (o < variables) return o;
      if (auto it = renumbered.find(o); it != renumbered.end()) return it->second;
      Term term = terms[static_cast<size_t>(o - variables)];
      term.a = copy(term.a);
      if (is_binary(term.kind)) term.b = copy(term.b);
      sub.terms.push_back(term);
      return renumbered[o] = variables + static_cast<int>(sub.terms.size()) - 1;
    };
    copy(operand);
    return sub;
  }
};

// The candidate's graph with inputs x0.. of the given shapes for the variables listed
// (`params`, in order; a variable not listed may not be read), or the error of a node that
// does not build at those shapes.
Expected<Graph> build_graph(const Candidate& candidate, const std::vector<int>& params,
                            const std::vector<std::vector<int64_t>>& dims, DType dtype,
                            std::string_view name) {
  Graph graph{std::string(name)};
  std::map<int, Value*> values;
  for (size_t p = 0; p < params.size(); ++p) {
    values[params[p]] = graph.add_input({dtype, Shape(dims[p])}, fmt::format("x{}", p));
  }
  for (size_t t = 0; t < candidate.terms.size(); ++t) {
    const Term& term = candidate.terms[t];
    std::vector<Value*> inputs = {values.at(term.a)};
    if (is_binary(term.kind)) inputs.push_back(values.at(term.b));
    Attrs attrs;
    Op op = Op::neg;
    switch (term.kind) {
      case Kind::neg: op = Op::neg; break;
      case Kind::relu: op = Op::relu; break;
      case Kind::transpose: op = Op::transpose; attrs.set("perm", std::vector<int64_t>{1, 0}); break;
      case Kind::sum_rows:
      case Kind::sum_columns:
        op = Op::reduce_sum;
        attrs.set("axes", std::vector<int64_t>{term.kind == Kind::sum_rows ? 0 : 1});
        attrs.set("keepdims", true);
        break;
      case Kind::twice: {
        KILN_ASSIGN_OR_RETURN(Node* two, graph.add_node(Op::constant, {},
                                                        {{"value", Array::scalar(dtype, 2)}}));
        inputs.push_back(two->output(0));
        op = Op::mul;
        break;
      }
      case Kind::add: op = Op::add; break;
      case Kind::mul: op = Op::mul; break;
      case Kind::matmul: op = Op::matmul; break;
    }
    KILN_ASSIGN_OR_RETURN(Node* node, graph.add_node(op, std::move(inputs), attrs));
    values[candidate.variables + static_cast<int>(t)] = node->output(0);
  }
  graph.set_outputs({values.at(candidate.output())});
  return graph;
}

constexpr int64_t kSquare = 3;

// Every candidate of up to `max_ops` terms whose every term is read by a later one, by
// expression (the first found of each, which has the fewest terms).
std::map<std::string, Candidate> enumerate(const GeneratorOptions& options) {
  std::map<std::string, Candidate> found;
  for (int v = 0; v < options.variables; ++v) {
    const Candidate variable{{}, options.variables, v};
    found.emplace(variable.expression(), variable);
  }
  Candidate current{{}, options.variables};
  const std::function<void()> extend = [&]() {
    if (!current.terms.empty()) {
      std::vector<bool> read(current.terms.size(), false);
      for (const Term& term : current.terms) {
        for (int o : {term.a, is_binary(term.kind) ? term.b : -1}) {
          if (o >= current.variables) read[static_cast<size_t>(o - current.variables)] = true;
        }
      }
      read.back() = true;
      if (std::all_of(read.begin(), read.end(), [](bool r) { return r; })) {
        found.emplace(current.expression(), current);
      }
    }
    if (static_cast<int>(current.terms.size()) == options.max_ops) return;
    const int pool = current.variables + static_cast<int>(current.terms.size());
    for (Kind kind : kKinds) {
      for (int a = 0; a < pool; ++a) {
        for (int b = 0; b < (is_binary(kind) ? pool : 1); ++b) {
          current.terms.push_back({kind, a, b});
          extend();
          current.terms.pop_back();
        }
      }
    }
  };
  extend();
  return found;
}

// The results on two sets of random inputs, to 10 significant digits.
Expected<std::string> fingerprint(const Candidate& candidate) {
  std::vector<int> all(static_cast<size_t>(candidate.variables));
  for (int v = 0; v < candidate.variables; ++v) all[static_cast<size_t>(v)] = v;
  const std::vector<std::vector<int64_t>> dims(all.size(), {kSquare, kSquare});
  KILN_ASSIGN_OR_RETURN(const Graph graph, build_graph(candidate, all, dims, DType::f64, "g"));
  std::string key = graph.outputs()[0]->shape().to_string() + ":";
  for (uint64_t seed : {11u, 12u}) {
    KILN_ASSIGN_OR_RETURN(const std::vector<Array> results,
                          interpret(graph, random_inputs(graph, {.seed = seed})));
    for (double v : results[0].data) key += fmt::format("{:.9e} ", v);
  }
  return key;
}

// `candidate` with its variables renumbered by `order` (old numbers, new order first).
Candidate renumber(const Candidate& candidate, const std::vector<int>& order) {
  std::map<int, int> to;
  for (size_t i = 0; i < order.size(); ++i) to[order[i]] = static_cast<int>(i);
  int next = static_cast<int>(order.size());
  for (int v = 0; v < candidate.variables; ++v) {
    if (!to.contains(v)) to[v] = next++;
  }
  Candidate result = candidate;
  const auto map = [&](int o) { return o < candidate.variables ? to.at(o) : o; };
  for (Term& term : result.terms) {
    term.a = map(term.a);
    if (is_binary(term.kind)) term.b = map(term.b);
  }
  if (result.terms.empty()) result.variable = map(result.variable);
  return result;
}

// The proper subexpressions of a candidate that are not variables, as text.
std::set<std::string> subexpressions(const Candidate& candidate) {
  std::set<std::string> result;
  for (size_t t = 0; t + 1 < candidate.terms.size(); ++t) {
    result.insert(candidate.expression(candidate.variables + static_cast<int>(t)));
  }
  return result;
}

// Every partition of `n` axes into blocks (restricted growth strings), finest first.
std::vector<std::vector<int>> axis_partitions(int n) {
  std::vector<std::vector<int>> partitions;
  std::vector<int> block(static_cast<size_t>(n), 0);
  const std::function<void(int, int)> grow = [&](int i, int blocks) {
    if (i == n) {
      partitions.push_back(block);
      return;
    }
    for (int b = 0; b <= blocks; ++b) {
      block[static_cast<size_t>(i)] = b;
      grow(i + 1, std::max(blocks, b + 1));
    }
  };
  grow(0, 0);
  const auto blocks = [](const std::vector<int>& p) { return *std::max_element(p.begin(), p.end()); };
  std::stable_sort(partitions.begin(), partitions.end(),
                   [&](const auto& x, const auto& y) { return blocks(x) > blocks(y); });
  return partitions;
}

// The rule source -> target at the finest extents both build with and still agree at; the
// square extents when no finer ones do.
std::optional<Rule> generalise(const Candidate& source, const Candidate& target,
                               const std::string& name, bool& generalised) {
  const std::vector<int> params = source.used_variables();
  const int axes = 2 * static_cast<int>(params.size());
  for (const std::vector<int>& partition : axis_partitions(axes)) {
    std::vector<std::vector<int64_t>> dims(params.size());
    for (int axis = 0; axis < axes; ++axis) {
      dims[static_cast<size_t>(axis / 2)].push_back(2 + partition[static_cast<size_t>(axis)]);
    }
    Expected<Graph> from = build_graph(source, params, dims, DType::f32, "source");
    Expected<Graph> to = build_graph(target, params, dims, DType::f32, "target");
    if (!from || !to || from->outputs()[0]->type() != to->outputs()[0]->type()) continue;
    Rule rule{name, "generated", {}, {}, std::move(from).value(), std::move(to).value()};
    if (!check_rule_numerically(rule).is_ok()) continue;
    generalised = *std::max_element(partition.begin(), partition.end()) > 0;
    return rule;
  }
  return std::nullopt;
}

}  // namespace

Expected<GeneratedRules> generate_rules(const GeneratorOptions& options) {
  if (options.max_ops < 1 || options.max_ops > 3 || options.variables < 1 || options.variables > 3) {
    return Status::errorf("the generator enumerates 1 to 3 ops over 1 to 3 variables");
  }
  GeneratedRules result;
  GeneratorCounts& counts = result.counts;
  auto start = Clock::now();
  const std::map<std::string, Candidate> candidates = enumerate(options);
  counts.graphs = static_cast<int>(candidates.size());
  counts.enumerate_seconds = seconds_since(start);

  start = Clock::now();
  std::map<std::string, std::vector<const Candidate*>> classes;  // fingerprint -> members
  std::map<std::string, std::string> class_of;                    // expression -> fingerprint
  for (const auto& [expression, candidate] : candidates) {
    Expected<std::string> key = fingerprint(candidate);
    if (!key) continue;  // does not build (cannot happen with square matrices)
    classes[*key].push_back(&candidate);
    class_of[expression] = *key;
  }
  counts.fingerprint_seconds = seconds_since(start);

  start = Clock::now();
  std::set<std::string> kept;  // sources after renaming
  std::vector<std::pair<Candidate, Candidate>> rules;
  for (auto& [key, members] : classes) {
    if (members.size() < 2) continue;
    ++counts.classes;
    std::sort(members.begin(), members.end(), [](const Candidate* a, const Candidate* b) {
      if (a->terms.size() != b->terms.size()) return a->terms.size() < b->terms.size();
      return a->expression() < b->expression();
    });
    const Candidate& smallest = *members.front();
    for (size_t m = 1; m < members.size(); ++m) {
      const Candidate& source = *members[m];
      const std::vector<int> used = source.used_variables();
      const std::vector<int> target_used = smallest.used_variables();
      if (!std::all_of(target_used.begin(), target_used.end(), [&](int v) {
            return std::find(used.begin(), used.end(), v) != used.end();
          })) {
        continue;
      }
      ++counts.pairs;
      Candidate renamed_source = renumber(source, used);
      Candidate renamed_target = renumber(smallest, used);
      if (!kept.insert(renamed_source.expression()).second) continue;
      ++counts.after_renaming;
      // Subsumption: a proper subexpression that is not the smallest graph of its class (a
      // smaller or equal rule rewrites it first, and the result pairs with the same target).
      bool implied = false;
      for (size_t t = 0; t + 1 < source.terms.size() && !implied; ++t) {
        const Candidate sub = source.subexpression(source.variables + static_cast<int>(t));
        auto key_of = class_of.find(sub.expression());
        implied = key_of != class_of.end() &&
                  classes.at(key_of->second).front()->expression() != sub.expression();
      }
      if (implied) continue;
      ++counts.after_subsumption;
      const std::set<std::string> in_source = subexpressions(renamed_source);
      std::set<std::string> in_target = subexpressions(renamed_target);
      if (!renamed_target.terms.empty()) in_target.insert(renamed_target.expression());
      if (std::any_of(in_source.begin(), in_source.end(),
                      [&](const std::string& s) { return in_target.contains(s); })) {
        continue;
      }
      ++counts.after_common;
      rules.emplace_back(std::move(renamed_source), std::move(renamed_target));
    }
  }
  for (const auto& [source, target] : rules) {
    bool generalised = false;
    // "add(neg(x0),x1)" -> "gen-add-neg-x0-x1"
    std::string name = "gen";
    bool gap = true;
    for (char c : source.expression()) {
      if (!std::isalnum(static_cast<unsigned char>(c))) {
        gap = true;
        continue;
      }
      if (gap) name += '-';
      name += c;
      gap = false;
    }
    std::optional<Rule> rule = generalise(source, target, name, generalised);
    if (!rule) continue;
    counts.generalised += generalised;
    result.rules.push_back(std::move(*rule));
  }
  counts.prune_seconds = seconds_since(start);
  return result;
}

std::string print_rules(const std::vector<Rule>& rules) {
  std::string text;
  for (const Rule& rule : rules) {
    text += fmt::format("rule {}\n", rule.name);
    if (!rule.extents.empty()) {
      std::vector<std::string> extents;
      for (const SymbolicExtent& e : rule.extents) {
        extents.push_back(fmt::format("{}[{}]", print_value_ref(*rule.source.inputs()[e.variable]),
                                      e.axis));
      }
      text += fmt::format("extents {}\n", fmt::join(extents, ", "));
    }
    for (const AttributeChoice& choice : rule.attribute_choices) {
      std::vector<std::string> values;
      for (const AttrValue& value : choice.values) values.push_back(print_attr_value(value));
      text += fmt::format("attributes {} = {}\n", choice.name, fmt::join(values, " | "));
    }
    text += print_graph(rule.source);
    text += print_graph(rule.target);
    text += "\n";
  }
  return text;
}

}  // namespace kiln::subst
