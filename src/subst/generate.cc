#include "subst/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/printer.h"

namespace kiln::subst {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// sum_rows and sum_columns reduce one axis keeping it (x [m, n] -> [1, n] and [m, 1]); twice
// multiplies by the constant 2 (the scalar multiply); flatten reshapes [m, n] to
// [1, m n]; broadcast makes a row [1, n] an [n, n] matrix and a column [m, 1] an [m, m] one;
// the concats join rows ([m1 + m2, n]) or columns; top and bottom are the pieces of a split
// into two halves of the rows, left and right of the columns. Over images [N, C, H, W] and
// convolution weights [O, C, KH, KW], "rows" is axis 0 and "columns" axis 1 (the concats join
// images or output channels, and input channels), conv is a convolution with stride 1
// and pads 1, and batch_norm an inference batch norm of an image by the family's four
// per-channel parameters (scale, bias, mean, variance), variables of their own that no other
// op reads: as TASO does, the op's weights come with it.
enum class Kind {
  neg, relu, transpose, sum_rows, sum_columns, twice, flatten, broadcast, top, bottom, left,
  right, add, mul, matmul, concat_rows, concat_columns, conv, batch_norm
};
constexpr Kind kMatrixKinds[] = {
    Kind::neg,    Kind::relu,  Kind::transpose, Kind::sum_rows, Kind::sum_columns, Kind::twice,
    Kind::flatten, Kind::broadcast, Kind::top,  Kind::bottom,   Kind::left,        Kind::right,
    Kind::add,    Kind::mul,   Kind::matmul,    Kind::concat_rows, Kind::concat_columns};
constexpr Kind kConvolutionKinds[] = {
    Kind::neg,  Kind::relu,  Kind::twice, Kind::top,         Kind::bottom,         Kind::left,
    Kind::right, Kind::add,  Kind::mul,   Kind::concat_rows, Kind::concat_columns, Kind::conv,
    Kind::batch_norm};

bool is_binary(Kind kind) {
  return kind == Kind::add || kind == Kind::mul || kind == Kind::matmul ||
         kind == Kind::concat_rows || kind == Kind::concat_columns || kind == Kind::conv;
}

// The convolutions family's batch norm parameters: four variables after the image and weights,
// each of kBatchNormChannels extents, so a batch norm reads an image of that many channels.
constexpr int kBatchNormParameters = 4;
constexpr int64_t kBatchNormChannels = 2;
constexpr int kBatchNormVariance = 3;  // the parameter drawn positive when fingerprinting

using Dims = std::vector<int64_t>;

// The dims of a concat along `axis`: all others equal.
std::optional<Dims> concat_dims(const Dims& a, const Dims& b, size_t axis) {
  if (a.size() != b.size() || a.size() <= axis) return std::nullopt;
  for (size_t i = 0; i < a.size(); ++i) {
    if (i != axis && a[i] != b[i]) return std::nullopt;
  }
  Dims result = a;
  result[axis] += b[axis];
  return result;
}

// The dims of one half of a split along `axis`.
std::optional<Dims> half_dims(const Dims& a, size_t axis) {
  if (a.size() <= axis || a[axis] % 2 != 0) return std::nullopt;
  Dims result = a;
  result[axis] /= 2;
  return result;
}

// The convolutions enumerated have stride 1 and pads 1: with the weights' 3x3 windows they keep
// an image's extent, so they chain.
constexpr int64_t kConvPad = 1;

// The shape of `kind` over operands of shapes `a` and `b` (b unused by unary kinds), or none
// where it does not build: enumeration skips those graphs.
std::optional<Dims> result_dims(Kind kind, const Dims& a, const Dims& b) {
  const bool matrix = a.size() == 2;
  switch (kind) {
    case Kind::neg:
    case Kind::relu:
    case Kind::twice: return a;
    case Kind::batch_norm:
      if (a.size() != 4 || a[1] != kBatchNormChannels) return std::nullopt;
      return a;
    case Kind::transpose:
      if (!matrix) return std::nullopt;
      return Dims{a[1], a[0]};
    case Kind::sum_rows:
      if (!matrix) return std::nullopt;
      return Dims{1, a[1]};
    case Kind::sum_columns:
      if (!matrix) return std::nullopt;
      return Dims{a[0], 1};
    case Kind::flatten:
      if (!matrix) return std::nullopt;
      return Dims{1, a[0] * a[1]};
    case Kind::broadcast:
      if (!matrix) return std::nullopt;
      if (a[0] == 1 && a[1] > 1) return Dims{a[1], a[1]};
      if (a[1] == 1 && a[0] > 1) return Dims{a[0], a[0]};
      return std::nullopt;
    case Kind::top:
    case Kind::bottom: return half_dims(a, 0);
    case Kind::left:
    case Kind::right: return half_dims(a, 1);
    case Kind::add:
    case Kind::mul: {
      if (a.size() != b.size()) return std::nullopt;
      Dims result(a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        if (a[i] != b[i] && a[i] != 1 && b[i] != 1) return std::nullopt;
        result[i] = std::max(a[i], b[i]);
      }
      return result;
    }
    case Kind::matmul:
      if (!matrix || b.size() != 2 || a[1] != b[0]) return std::nullopt;
      return Dims{a[0], b[1]};
    case Kind::concat_rows: return concat_dims(a, b, 0);
    case Kind::concat_columns: return concat_dims(a, b, 1);
    case Kind::conv: {
      // x [N, C, H, W] and w [O, C, KH, KW].
      if (a.size() != 4 || b.size() != 4 || a[1] != b[1]) return std::nullopt;
      const int64_t h = a[2] + 2 * kConvPad - b[2] + 1;
      const int64_t w = a[3] + 2 * kConvPad - b[3] + 1;
      if (h < 1 || w < 1) return std::nullopt;
      return Dims{a[0], b[0], h, w};
    }
  }
  return std::nullopt;
}

std::string_view kind_name(Kind kind) {
  switch (kind) {
    case Kind::neg: return "neg";
    case Kind::relu: return "relu";
    case Kind::transpose: return "transpose";
    case Kind::sum_rows: return "sumrows";
    case Kind::sum_columns: return "sumcolumns";
    case Kind::twice: return "twice";
    case Kind::flatten: return "flatten";
    case Kind::broadcast: return "broadcast";
    case Kind::top: return "top";
    case Kind::bottom: return "bottom";
    case Kind::left: return "left";
    case Kind::right: return "right";
    case Kind::add: return "add";
    case Kind::mul: return "mul";
    case Kind::matmul: return "matmul";
    case Kind::concat_rows: return "concatrows";
    case Kind::concat_columns: return "concatcolumns";
    case Kind::conv: return "conv";
    case Kind::batch_norm: return "batchnorm";
  }
  return "?";
}

// An op of an enumerated graph. Operand o < variables is variable o; otherwise it is the
// result of term o - variables. A unary op has one operand, a binary one two, a batch norm
// five (the image, then its parameters).
struct Term {
  Kind kind;
  std::vector<int> operands;
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
    std::vector<std::string> operands;
    for (int o : term.operands) operands.push_back(expression(o));
    if ((term.kind == Kind::add || term.kind == Kind::mul) && operands[1] < operands[0]) {
      std::swap(operands[0], operands[1]);
    }
    return fmt::format("{}({})", kind_name(term.kind), fmt::join(operands, ","));
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
      for (int o : terms[static_cast<size_t>(operand - variables)].operands) visit(o);
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
      for (int& read : term.operands) read = copy(read);
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
    std::vector<Value*> inputs;
    for (int o : term.operands) inputs.push_back(values.at(o));
    Attrs attrs;
    Op op = Op::neg;
    int piece = 0;  // the output of a split that the term is
    const Shape& shape = inputs[0]->shape();
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
      case Kind::flatten:
        op = Op::reshape;
        attrs.set("shape", std::vector<int64_t>{1, shape.num_elements()});
        break;
      case Kind::broadcast: {
        const int64_t n = std::max(shape.dim(0), shape.dim(1));
        op = Op::broadcast_to;
        attrs.set("shape", std::vector<int64_t>{n, n});
        break;
      }
      case Kind::top:
      case Kind::bottom:
      case Kind::left:
      case Kind::right: {
        const int axis = term.kind == Kind::top || term.kind == Kind::bottom ? 0 : 1;
        op = Op::split;
        attrs.set("axis", int64_t{axis});
        attrs.set("sizes", std::vector<int64_t>(2, shape.dim(axis) / 2));
        piece = term.kind == Kind::bottom || term.kind == Kind::right ? 1 : 0;
        break;
      }
      case Kind::add: op = Op::add; break;
      case Kind::mul: op = Op::mul; break;
      case Kind::matmul: op = Op::matmul; break;
      case Kind::concat_rows:
      case Kind::concat_columns:
        op = Op::concat;
        attrs.set("axis", int64_t{term.kind == Kind::concat_rows ? 0 : 1});
        break;
      case Kind::conv:
        op = Op::conv;
        attrs.set("strides", std::vector<int64_t>{1, 1});
        attrs.set("pads", std::vector<int64_t>(4, kConvPad));
        break;
      case Kind::batch_norm: op = Op::batch_norm_infer; break;
    }
    KILN_ASSIGN_OR_RETURN(Node* node, graph.add_node(op, std::move(inputs), attrs));
    values[candidate.variables + static_cast<int>(t)] = node->output(piece);
  }
  graph.set_outputs({values.at(candidate.output())});
  return graph;
}

// The variables' shapes while enumerating and fingerprinting: square matrices of an even
// extent (so that they split in halves); or, for convolutions, an image x0 [N, C, H, W] and
// weights [O, C, KH, KW] with O = C (so that convolutions chain), then the batch norm's four
// parameters [C].
constexpr int64_t kSquare = 4;

std::vector<Dims> variable_dims(const GeneratorOptions& options) {
  std::vector<Dims> dims(static_cast<size_t>(options.variables), Dims{kSquare, kSquare});
  if (options.family == Family::convolutions) {
    for (size_t v = 0; v < dims.size(); ++v) {
      dims[v] = v == 0 ? Dims{1, kBatchNormChannels, 4, 4} : Dims{2, kBatchNormChannels, 3, 3};
    }
    dims.insert(dims.end(), kBatchNormParameters, Dims{kBatchNormChannels});
  }
  return dims;
}

// The variables of a candidate: the options' and, for convolutions, the batch norm's.
int all_variables(const GeneratorOptions& options) {
  return options.variables + (options.family == Family::convolutions ? kBatchNormParameters : 0);
}

std::span<const Kind> kinds_of(Family family) {
  if (family == Family::convolutions) return kConvolutionKinds;
  return kMatrixKinds;
}

// Every candidate of up to `max_ops` terms whose every term is read by a later one, by
// expression (the first found of each, which has the fewest terms).
std::map<std::string, Candidate> enumerate(const GeneratorOptions& options) {
  std::map<std::string, Candidate> found;
  const int variables = all_variables(options);
  for (int v = 0; v < options.variables; ++v) {
    const Candidate variable{{}, variables, v};
    found.emplace(variable.expression(), variable);
  }
  Candidate current{{}, variables};
  // The shape of each operand: the variables', then each term's.
  std::vector<Dims> dims = variable_dims(options);
  // The operands an op may read: the options' variables and the terms so far (the batch norm's
  // parameters only through a batch norm).
  const auto operand_pool = [&] {
    std::vector<int> pool(static_cast<size_t>(options.variables));
    std::iota(pool.begin(), pool.end(), 0);
    for (size_t t = 0; t < current.terms.size(); ++t) pool.push_back(variables + static_cast<int>(t));
    return pool;
  };
  const std::function<void()> extend = [&]() {
    if (!current.terms.empty()) {
      std::vector<bool> read(current.terms.size(), false);
      for (const Term& term : current.terms) {
        for (int o : term.operands) {
          if (o >= current.variables) read[static_cast<size_t>(o - current.variables)] = true;
        }
      }
      read.back() = true;
      if (std::all_of(read.begin(), read.end(), [](bool r) { return r; })) {
        found.emplace(current.expression(), current);
      }
    }
    if (static_cast<int>(current.terms.size()) == options.max_ops) return;
    const std::vector<int> pool = operand_pool();
    for (Kind kind : kinds_of(options.family)) {
      for (int a : pool) {
        for (int b : is_binary(kind) ? pool : std::vector<int>{a}) {
          const std::optional<Dims> result =
              result_dims(kind, dims[static_cast<size_t>(a)], dims[static_cast<size_t>(b)]);
          if (!result) continue;
          std::vector<int> operands = {a};
          if (is_binary(kind)) operands.push_back(b);
          if (kind == Kind::batch_norm) {
            for (int p = 0; p < kBatchNormParameters; ++p) operands.push_back(options.variables + p);
          }
          current.terms.push_back({kind, std::move(operands)});
          dims.push_back(*result);
          extend();
          dims.pop_back();
          current.terms.pop_back();
        }
      }
    }
  };
  extend();
  return found;
}

// The results on two sets of random inputs, to 10 significant digits. A batch norm's variance
// is drawn positive (`variance`, the variable's number, or -1), so that no element is NaN.
Expected<std::string> fingerprint(const Candidate& candidate, const std::vector<Dims>& dims,
                                  int variance) {
  std::vector<int> all(static_cast<size_t>(candidate.variables));
  for (int v = 0; v < candidate.variables; ++v) all[static_cast<size_t>(v)] = v;
  KILN_ASSIGN_OR_RETURN(const Graph graph, build_graph(candidate, all, dims, DType::f64, "g"));
  std::string key = graph.outputs()[0]->shape().to_string() + ":";
  for (uint64_t seed : {11u, 12u}) {
    std::vector<Array> inputs = random_inputs(graph, {.seed = seed});
    if (variance >= 0) {
      for (double& v : inputs[static_cast<size_t>(variance)].data) v = std::fabs(v);
    }
    KILN_ASSIGN_OR_RETURN(const std::vector<Array> results, interpret(graph, inputs));
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
    for (int& operand : term.operands) operand = map(operand);
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

// The rule source -> target at `dims` (by parameter), when both build there with one result
// type and agree numerically.
std::optional<Rule> rule_at(const Candidate& source, const Candidate& target,
                            const std::vector<Dims>& dims, const std::string& name) {
  const std::vector<int> params = source.used_variables();
  Expected<Graph> from = build_graph(source, params, dims, DType::f32, "source");
  Expected<Graph> to = build_graph(target, params, dims, DType::f32, "target");
  if (!from || !to || from->outputs()[0]->type() != to->outputs()[0]->type()) return std::nullopt;
  Rule rule;
  rule.name = name;
  rule.origin = "generated";
  rule.source = std::move(from).value();
  rule.target = std::move(to).value();
  if (!check_rule_numerically(rule).is_ok()) return std::nullopt;
  return rule;
}

// Matrices: the finest extents of all, every partition of the variables' axes tried, finest
// first (extents 2, 3, ... by block).
std::optional<Rule> finest_matrix_rule(const Candidate& source, const Candidate& target,
                                       const std::string& name, bool& generalised) {
  const size_t params = source.used_variables().size();
  const int axes = 2 * static_cast<int>(params);
  for (const std::vector<int>& partition : axis_partitions(axes)) {
    std::vector<Dims> dims(params);
    for (int axis = 0; axis < axes; ++axis) {
      dims[static_cast<size_t>(axis / 2)].push_back(2 + partition[static_cast<size_t>(axis)]);
    }
    if (std::optional<Rule> rule = rule_at(source, target, dims, name)) {
      generalised = *std::max_element(partition.begin(), partition.end()) > 0;
      return rule;
    }
  }
  return std::nullopt;
}

// Images and weights have too many axes to try every partition (12 for an image and two
// weights), so their extents are refined greedily from the enumeration's: each group of axes
// at one position of the variables' shapes (the spatial ones together, so that images and
// kernels stay square and the prover's instances few; a batch norm parameter's one axis with
// the channels) with one extent takes a fresh extent of its own where the rule still holds.
std::optional<Rule> refined_convolution_rule(const Candidate& source, const Candidate& target,
                                             std::vector<Dims> dims, const std::string& name,
                                             bool& generalised) {
  std::optional<Rule> rule = rule_at(source, target, dims, name);
  if (!rule) return std::nullopt;
  int64_t fresh = 5;
  const auto position = [](const Dims& d, size_t axis) {
    return d.size() == 1 ? size_t{1} : std::min<size_t>(axis, 2);
  };
  std::set<std::pair<size_t, int64_t>> groups;
  for (const Dims& d : dims) {
    for (size_t axis = 0; axis < d.size(); ++axis) groups.emplace(position(d, axis), d[axis]);
  }
  for (const auto& [where, extent] : groups) {
    std::vector<Dims> tried = dims;
    for (Dims& d : tried) {
      for (size_t axis = 0; axis < d.size(); ++axis) {
        if (position(d, axis) == where && d[axis] == extent) d[axis] = fresh;
      }
    }
    if (std::optional<Rule> refined = rule_at(source, target, tried, name)) {
      rule = std::move(refined);
      dims = std::move(tried);
      generalised = true;
      ++fresh;
    }
  }
  return rule;
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
  const std::vector<Dims> dims = variable_dims(options);
  const int variance =
      options.family == Family::convolutions ? options.variables + kBatchNormVariance : -1;
  for (const auto& [expression, candidate] : candidates) {
    Expected<std::string> key = fingerprint(candidate, dims, variance);
    if (!key) continue;  // does not build (enumeration checked the shapes, so cannot happen)
    classes[*key].push_back(&candidate);
    class_of[expression] = *key;
  }
  counts.fingerprint_seconds = seconds_since(start);

  start = Clock::now();
  std::set<std::string> kept;  // sources after renaming
  struct Pair {
    Candidate source, target;
    std::vector<Dims> dims;  // the enumeration's shapes of the renamed variables
  };
  std::vector<Pair> rules;
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
      std::vector<Dims> renamed_dims;
      for (int v : used) renamed_dims.push_back(dims[static_cast<size_t>(v)]);
      rules.push_back(
          {std::move(renamed_source), std::move(renamed_target), std::move(renamed_dims)});
    }
  }
  for (const auto& [source, target, pair_dims] : rules) {
    bool generalised = false;
    // "add(neg(x0),x1)" -> "gen-add-neg-x0-x1"; "gen4d-..." over images and weights.
    std::string name = options.family == Family::convolutions ? "gen4d" : "gen";
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
    std::optional<Rule> rule =
        options.family == Family::convolutions
            ? refined_convolution_rule(source, target, pair_dims, name, generalised)
            : finest_matrix_rule(source, target, name, generalised);
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
    for (const ConstantVariable& constant : rule.constants) {
      text += fmt::format("constant {}{}\n",
                          print_value_ref(*rule.source.inputs()[constant.variable]),
                          constant.attribute.empty() ? "" : " as " + constant.attribute);
    }
    if (!rule.dtypes.empty()) {
      std::vector<std::string_view> names;
      for (const DType dtype : rule.dtypes) names.push_back(dtype_name(dtype));
      text += fmt::format("dtypes {}\n", fmt::join(names, " | "));
    }
    if (!rule.ranks.variables.empty()) {
      std::vector<std::string> variables;
      for (const size_t v : rule.ranks.variables) {
        variables.push_back(print_value_ref(*rule.source.inputs()[v]));
      }
      text += fmt::format("ranks {} {}\n", fmt::join(variables, " "),
                          fmt::join(rule.ranks.ranks, " | "));
    }
    text += print_graph(rule.source);
    text += print_graph(rule.target);
    text += "\n";
  }
  return text;
}

}  // namespace kiln::subst
