#include "subst/prove.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <z3++.h>

#include "ir/printer.h"
#include "passes/dead_code.h"
#include "subst/apply.h"

namespace kiln::subst {
namespace {

// A tensor of Z3 real terms, row-major.
struct SymTensor {
  std::vector<int64_t> dims;
  std::vector<z3::expr> elements;
};

std::vector<int64_t> index_of(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> index(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    index[d] = flat % dims[d];
    flat /= dims[d];
  }
  return index;
}

int64_t flat_of(const std::vector<int64_t>& index, const std::vector<int64_t>& dims) {
  int64_t flat = 0;
  for (size_t d = 0; d < dims.size(); ++d) flat = flat * dims[d] + index[d];
  return flat;
}

int64_t count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// The element of `x` that broadcasting reads for output index `index` (numpy rules: axes
// aligned at the right, extent-1 axes repeated).
const z3::expr& broadcast_read(const SymTensor& x, const std::vector<int64_t>& index) {
  std::vector<int64_t> at(x.dims.size());
  const size_t offset = index.size() - x.dims.size();
  for (size_t d = 0; d < x.dims.size(); ++d) at[d] = x.dims[d] == 1 ? 0 : index[offset + d];
  return x.elements[static_cast<size_t>(flat_of(at, x.dims))];
}

// 2^k in decimal, for exact constants.
std::string power_of_two(int k) {
  std::vector<int> digits = {1};  // least significant first
  for (int i = 0; i < k; ++i) {
    int carry = 0;
    for (int& digit : digits) {
      const int doubled = digit * 2 + carry;
      digit = doubled % 10;
      carry = doubled / 10;
    }
    if (carry > 0) digits.push_back(carry);
  }
  std::string text;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) text += static_cast<char>('0' + *it);
  return text;
}

class SymbolicEvaluator {
 public:
  explicit SymbolicEvaluator(z3::context& context) : context_(context) {}

  Expected<std::vector<SymTensor>> run(const Graph& graph, const std::vector<SymTensor>& inputs) {
    std::map<const Value*, SymTensor> values;
    for (size_t i = 0; i < graph.inputs().size(); ++i) values.emplace(graph.inputs()[i], inputs[i]);
    for (const Node* node : graph.nodes()) {
      std::vector<const SymTensor*> operands;
      for (const Value* input : node->inputs()) operands.push_back(&values.at(input));
      KILN_ASSIGN_OR_RETURN(std::vector<SymTensor> results, evaluate(*node, operands));
      for (int k = 0; k < node->num_outputs(); ++k) {
        values.emplace(node->output(k), std::move(results[static_cast<size_t>(k)]));
      }
    }
    std::vector<SymTensor> outputs;
    for (const Value* output : graph.outputs()) outputs.push_back(values.at(output));
    return outputs;
  }

  // The uninterpreted functions the graphs used, by name, and their applications.
  const std::map<std::string, z3::func_decl>& functions() const { return functions_; }
  const std::vector<z3::expr>& applications(const std::string& name) { return applications_[name]; }

 private:
  Expected<std::vector<SymTensor>> evaluate(const Node& node,
                                            const std::vector<const SymTensor*>& in) {
    const std::vector<int64_t>& out_dims = node.output(0)->shape().dims();
    SymTensor out{out_dims, {}};
    const int64_t n = count(out_dims);
    const auto each = [&](auto&& element) {
      for (int64_t i = 0; i < n; ++i) out.elements.push_back(element(index_of(i, out_dims)));
      return std::vector<SymTensor>{out};
    };
    const z3::expr zero = context_.real_val(0);
    switch (node.op()) {
      case Op::neg: return each([&](const auto& i) { return -broadcast_read(*in[0], i); });
      case Op::identity: return each([&](const auto& i) { return broadcast_read(*in[0], i); });
      case Op::relu:
        return each([&](const auto& i) {
          const z3::expr& x = broadcast_read(*in[0], i);
          return z3::ite(x > zero, x, zero);
        });
      case Op::abs:
        return each([&](const auto& i) {
          const z3::expr& x = broadcast_read(*in[0], i);
          return z3::ite(x >= zero, x, -x);
        });
      case Op::add:
        return each([&](const auto& i) { return broadcast_read(*in[0], i) + broadcast_read(*in[1], i); });
      case Op::sub:
        return each([&](const auto& i) { return broadcast_read(*in[0], i) - broadcast_read(*in[1], i); });
      case Op::mul:
        return each([&](const auto& i) { return broadcast_read(*in[0], i) * broadcast_read(*in[1], i); });
      case Op::div:
        return each([&](const auto& i) { return broadcast_read(*in[0], i) / broadcast_read(*in[1], i); });
      case Op::reciprocal:
        return each(
            [&](const auto& i) { return context_.real_val(1) / broadcast_read(*in[0], i); });
      case Op::max:
      case Op::min:
        return each([&](const auto& i) {
          const z3::expr& a = broadcast_read(*in[0], i);
          const z3::expr& b = broadcast_read(*in[1], i);
          return node.op() == Op::max ? z3::ite(a >= b, a, b) : z3::ite(a <= b, a, b);
        });
      case Op::broadcast_to: return each([&](const auto& i) { return broadcast_read(*in[0], i); });
      case Op::reshape:
        out.elements = in[0]->elements;
        return std::vector<SymTensor>{out};
      case Op::transpose: {
        std::vector<int64_t> perm = node.attrs().get_ints("perm");
        if (perm.empty()) {
          for (size_t d = in[0]->dims.size(); d-- > 0;) perm.push_back(static_cast<int64_t>(d));
        }
        return each([&](const auto& i) {
          std::vector<int64_t> at(i.size());
          for (size_t d = 0; d < i.size(); ++d) at[static_cast<size_t>(perm[d])] = i[d];
          return in[0]->elements[static_cast<size_t>(flat_of(at, in[0]->dims))];
        });
      }
      case Op::matmul: return matmul(node, in, out);
      case Op::conv: return conv(node, in, out);
      case Op::batch_norm_infer: {
        // (x - mean) rsqrt(var + epsilon) scale + bias per channel (axis 1), with rsqrt the
        // uninterpreted function of the rsqrt op, so a rule may write the same statistic with
        // rsqrt or with another batch norm.
        KILN_ASSIGN_OR_RETURN(const z3::expr epsilon, constant(node.attrs().get_float("epsilon")));
        const z3::func_decl rsqrt = function("rsqrt");
        return each([&](const auto& i) {
          const size_t c = static_cast<size_t>(i[1]);
          z3::expr r = rsqrt(in[4]->elements[c] + epsilon);
          applications_["rsqrt"].push_back(r);
          return (broadcast_read(*in[0], i) - in[3]->elements[c]) * r * in[1]->elements[c] +
                 in[2]->elements[c];
        });
      }
      case Op::concat: {
        const int axis = *normalize_axis(node.attrs().get_int("axis"), static_cast<int>(out_dims.size()));
        return each([&](const auto& i) {
          std::vector<int64_t> at = i;
          for (const SymTensor* part : in) {
            if (at[static_cast<size_t>(axis)] < part->dims[static_cast<size_t>(axis)]) {
              return part->elements[static_cast<size_t>(flat_of(at, part->dims))];
            }
            at[static_cast<size_t>(axis)] -= part->dims[static_cast<size_t>(axis)];
          }
          return zero;  // unreachable: the output's extent is the parts' sum
        });
      }
      case Op::split: {
        const SymTensor& x = *in[0];
        const int axis = *normalize_axis(node.attrs().get_int("axis"), static_cast<int>(x.dims.size()));
        std::vector<SymTensor> parts;
        int64_t start = 0;
        for (int k = 0; k < node.num_outputs(); ++k) {
          SymTensor part{node.output(k)->shape().dims(), {}};
          for (int64_t i = 0; i < count(part.dims); ++i) {
            std::vector<int64_t> at = index_of(i, part.dims);
            at[static_cast<size_t>(axis)] += start;
            part.elements.push_back(x.elements[static_cast<size_t>(flat_of(at, x.dims))]);
          }
          start += part.dims[static_cast<size_t>(axis)];
          parts.push_back(std::move(part));
        }
        return parts;
      }
      case Op::reduce_sum: {
        const SymTensor& x = *in[0];
        const std::vector<bool> reduced =
            *reduced_axes(node.input(0)->type(), node.attrs().get_ints("axes"));
        const bool keepdims = node.attrs().get_bool("keepdims");
        std::vector<std::optional<z3::expr>> sums(static_cast<size_t>(n));
        for (int64_t i = 0; i < count(x.dims); ++i) {
          const std::vector<int64_t> at = index_of(i, x.dims);
          std::vector<int64_t> to;
          for (size_t d = 0; d < at.size(); ++d) {
            if (!reduced[d]) {
              to.push_back(at[d]);
            } else if (keepdims) {
              to.push_back(0);
            }
          }
          std::optional<z3::expr>& sum = sums[static_cast<size_t>(flat_of(to, out_dims))];
          sum = sum ? *sum + x.elements[static_cast<size_t>(i)] : x.elements[static_cast<size_t>(i)];
        }
        for (const std::optional<z3::expr>& sum : sums) out.elements.push_back(sum ? *sum : zero);
        return std::vector<SymTensor>{out};
      }
      case Op::constant: {
        for (double v : node.attrs().get_tensor("value").data) {
          KILN_ASSIGN_OR_RETURN(z3::expr c, constant(v));
          out.elements.push_back(c);
        }
        return std::vector<SymTensor>{out};
      }
      default: break;
    }
    if (node.def().fusion_kind == FusionKind::elementwise && node.num_inputs() == 1 &&
        node.num_outputs() == 1 && is_floating(node.output(0)->dtype()) &&
        node.input(0)->dtype() == node.output(0)->dtype()) {
      // Uninterpreted: the op's name with its attributes, the same function in both graphs.
      const std::string printed = print_node(node);
      const size_t attrs = printed.find(") {");
      const std::string name =
          std::string(node.op_name()) +
          (attrs == std::string::npos ? "" : printed.substr(attrs + 2, printed.find('}', attrs) - attrs - 1));
      const z3::func_decl f = function(name);
      return each([&](const auto& i) {
        z3::expr application = f(broadcast_read(*in[0], i));
        applications_[name].push_back(application);
        return application;
      });
    }
    return Status::errorf("no symbolic semantics for '{}'", node.op_name());
  }

  // The uninterpreted real function `name`, the same for every use in both graphs.
  z3::func_decl function(const std::string& name) {
    auto it = functions_.find(name);
    if (it == functions_.end()) {
      it = functions_.emplace(name, context_.function(name.c_str(), context_.real_sort(),
                                                      context_.real_sort())).first;
    }
    return it->second;
  }

  // x [N, C, spatial...] by w [O, C / groups, kernel...]: each output element the sum over its
  // group's input channels and the kernel's positions that fall inside x (padding is zero).
  Expected<std::vector<SymTensor>> conv(const Node& node, const std::vector<const SymTensor*>& in,
                                        SymTensor out) {
    const SymTensor& x = *in[0];
    const SymTensor& w = *in[1];
    const size_t spatial = x.dims.size() - 2;
    const auto per_axis = [&](const char* name, size_t n, int64_t fill) {
      std::vector<int64_t> values = node.attrs().get_ints(name);
      if (values.empty()) values.assign(n, fill);
      return values;
    };
    const std::vector<int64_t> strides = per_axis("strides", spatial, 1);
    const std::vector<int64_t> dilations = per_axis("dilations", spatial, 1);
    const std::vector<int64_t> pads = per_axis("pads", 2 * spatial, 0);  // begins, then ends
    const int64_t groups = node.attrs().get_int("groups");
    const int64_t group_in = w.dims[1];
    const int64_t group_out = w.dims[0] / groups;
    const std::vector<int64_t> window(w.dims.begin() + 1, w.dims.end());  // [C/g, kernel...]
    for (int64_t i = 0; i < count(out.dims); ++i) {
      const std::vector<int64_t> o = index_of(i, out.dims);
      z3::expr sum = context_.real_val(0);
      for (int64_t t = 0; t < count(window); ++t) {
        const std::vector<int64_t> k = index_of(t, window);  // [channel in group, kernel...]
        std::vector<int64_t> at = {o[0], (o[1] / group_out) * group_in + k[0]};
        bool inside = true;
        for (size_t d = 0; d < spatial && inside; ++d) {
          const int64_t p = o[2 + d] * strides[d] - pads[d] + k[1 + d] * dilations[d];
          inside = p >= 0 && p < x.dims[2 + d];
          at.push_back(p);
        }
        if (!inside) continue;
        std::vector<int64_t> w_at = {o[1]};
        w_at.insert(w_at.end(), k.begin(), k.end());
        sum = sum + x.elements[static_cast<size_t>(flat_of(at, x.dims))] *
                        w.elements[static_cast<size_t>(flat_of(w_at, w.dims))];
      }
      out.elements.push_back(sum);
    }
    return std::vector<SymTensor>{out};
  }

  // [..., m, k] x [..., k, n] with the batch axes broadcast (numpy rules), either operand's
  // last two axes transposed by its flag.
  Expected<std::vector<SymTensor>> matmul(const Node& node, const std::vector<const SymTensor*>& in,
                                          SymTensor out) {
    const SymTensor& a = *in[0];
    const SymTensor& b = *in[1];
    const bool ta = node.attrs().get_bool("transpose_a");
    const bool tb = node.attrs().get_bool("transpose_b");
    const size_t ra = a.dims.size();
    const size_t rank = out.dims.size();
    const int64_t inner = ta ? a.dims[ra - 2] : a.dims[ra - 1];
    // The element of a matrix operand at (row, col) of the product's convention, for the
    // output's batch index `batch`.
    const auto at = [](const SymTensor& x, bool transposed, const std::vector<int64_t>& batch,
                       int64_t row, int64_t col) {
      const size_t r = x.dims.size();
      std::vector<int64_t> index(r);
      const size_t offset = batch.size() - (r - 2);
      for (size_t d = 0; d + 2 < r; ++d) index[d] = x.dims[d] == 1 ? 0 : batch[offset + d];
      index[r - 2] = transposed ? col : row;
      index[r - 1] = transposed ? row : col;
      return x.elements[static_cast<size_t>(flat_of(index, x.dims))];
    };
    for (int64_t i = 0; i < count(out.dims); ++i) {
      const std::vector<int64_t> index = index_of(i, out.dims);
      const std::vector<int64_t> batch(index.begin(), index.end() - 2);
      const int64_t row = index[rank - 2];
      const int64_t col = index[rank - 1];
      z3::expr sum = context_.real_val(0);
      for (int64_t k = 0; k < inner; ++k) sum = sum + at(a, ta, batch, row, k) * at(b, tb, batch, k, col);
      out.elements.push_back(sum);
    }
    return std::vector<SymTensor>{out};
  }

  // A double as an exact rational: its 53-bit integer mantissa times a power of two.
  Expected<z3::expr> constant(double v) {
    if (!std::isfinite(v)) return Status::errorf("no symbolic semantics for the constant {}", v);
    int exponent = 0;
    const double mantissa = std::frexp(std::fabs(v), &exponent);  // |v| = mantissa * 2^exponent
    const std::string numerator = std::to_string(static_cast<int64_t>(std::ldexp(mantissa, 53)));
    exponent -= 53;
    const z3::expr magnitude =
        exponent >= 0
            ? context_.real_val(numerator.c_str()) * context_.real_val(power_of_two(exponent).c_str())
            : context_.real_val(fmt::format("{}/{}", numerator, power_of_two(-exponent)).c_str());
    return v < 0 ? -magnitude : magnitude;
  }

  z3::context& context_;
  std::map<std::string, z3::func_decl> functions_;
  std::map<std::string, std::vector<z3::expr>> applications_;
};

// The axioms about `exp`, instantiated at the terms the graphs built (so the query stays free
// of quantifiers, which Z3 decides quickly, where the quantified axioms made it time out):
// for every exp(a + b + ...) the graphs apply, exp(a + b + ...) = exp(a) exp(b) ..., and for
// every exp(a - b), exp(a - b) = exp(a) / exp(b).
std::vector<z3::expr> exp_axioms(const std::vector<z3::expr>& applications, const z3::func_decl& exp) {
  std::vector<z3::expr> axioms;
  for (const z3::expr& application : applications) {
    const z3::expr argument = application.arg(0);
    if (!argument.is_app()) continue;
    const Z3_decl_kind kind = argument.decl().decl_kind();
    if (kind == Z3_OP_ADD) {
      z3::expr product = exp(argument.arg(0));
      for (unsigned i = 1; i < argument.num_args(); ++i) product = product * exp(argument.arg(i));
      axioms.push_back(application == product);
    } else if (kind == Z3_OP_SUB && argument.num_args() == 2) {
      axioms.push_back(application == exp(argument.arg(0)) / exp(argument.arg(1)));
    }
  }
  return axioms;
}

// The distinct example extents of the rule's variables that an instance may change.
std::vector<int64_t> example_extents(const Rule& rule) {
  std::set<int64_t> extents;
  for (const Value* param : rule.source.inputs()) {
    for (int64_t d : param->shape().dims()) {
      if (d >= 2) extents.insert(d);
    }
  }
  return {extents.begin(), extents.end()};
}

// Every assignment of the rule's attribute choices (rule.h), the source's own values first;
// one empty assignment for a rule without choices.
std::vector<std::map<std::string, AttrValue>> attribute_assignments(const Rule& rule) {
  std::map<std::string, AttrValue> own;
  for (const AttributeChoice& choice : rule.attribute_choices) {
    for (const Node* node : rule.source.nodes()) {
      if (const AttrValue* value = node->attrs().find(choice.name)) own.emplace(choice.name, *value);
    }
  }
  std::vector<std::map<std::string, AttrValue>> assignments = {{}};
  for (const AttributeChoice& choice : rule.attribute_choices) {
    std::vector<std::map<std::string, AttrValue>> extended;
    for (const auto& assignment : assignments) {
      for (const AttrValue& value : choice.values) {
        auto next = assignment;
        next.emplace(choice.name, value);
        extended.push_back(std::move(next));
      }
    }
    assignments = std::move(extended);
  }
  std::ranges::stable_partition(assignments, [&](const auto& a) { return a == own; });
  return assignments;
}

// The rule's source built in `graph` at the extents `map` gives and with the attribute values
// `attributes` chooses, as a match of the rule there; nullopt where a node does not build.
std::optional<Match> build_source(const Rule& rule, const std::map<int64_t, int64_t>& map,
                                  const std::map<std::string, AttrValue>& attributes,
                                  Graph& graph) {
  Match match;
  match.attributes = attributes;
  std::map<const Value*, Value*> copied;
  for (const Value* param : rule.source.inputs()) {
    std::vector<int64_t> dims;
    for (int64_t d : param->shape().dims()) dims.push_back(map.contains(d) ? map.at(d) : d);
    Value* input = graph.add_input({param->dtype(), Shape(dims)}, param->name());
    copied.emplace(param, input);
    match.variables.push_back(input);
  }
  for (const Node* node : rule.source.nodes()) {
    std::vector<Value*> inputs;
    for (const Value* input : node->inputs()) inputs.push_back(copied.at(input));
    Attrs attrs = node->attrs();
    for (const auto& [name, value] : attributes) {
      if (attrs.contains(name)) attrs.set(name, value);
    }
    Expected<Node*> made = graph.add_node(node->op(), std::move(inputs), attrs);
    if (!made) return std::nullopt;
    match.nodes.push_back(*made);
    for (int k = 0; k < node->num_outputs(); ++k) copied.emplace(node->output(k), (*made)->output(k));
  }
  std::vector<Value*> outputs;
  for (const Value* result : rule.source.outputs()) outputs.push_back(copied.at(result));
  graph.set_outputs(outputs);
  return match;
}

// The source at the extents `map` gives, and its rewrite by the rule; nullopt where either
// does not build.
std::optional<std::pair<Graph, Graph>> instantiate(
    const Rule& rule, const std::map<int64_t, int64_t>& map,
    const std::map<std::string, AttrValue>& attributes) {
  Graph source("source");
  const std::optional<Match> match = build_source(rule, map, attributes, source);
  if (!match) return std::nullopt;
  Graph target = source.clone();
  if (!apply_match(target, rule, match_in_copy(source, *match, target))) return std::nullopt;
  eliminate_dead_code(target);
  return std::pair{std::move(source), std::move(target)};
}

// Proves one instance; an error is a counterexample or Z3 giving up (`rejection` says which),
// or an op the evaluator does not know.
Status prove_instance(const Rule& rule, const Graph& source, const Graph& target,
                      Rejection& rejection) {
  z3::context context;
  std::vector<SymTensor> inputs;
  for (size_t p = 0; p < source.inputs().size(); ++p) {
    SymTensor input{source.inputs()[p]->shape().dims(), {}};
    for (int64_t i = 0; i < count(input.dims); ++i) {
      input.elements.push_back(context.real_const(fmt::format("v{}_{}", p, i).c_str()));
    }
    inputs.push_back(std::move(input));
  }
  SymbolicEvaluator evaluator(context);
  Expected<std::vector<SymTensor>> source_terms = evaluator.run(source, inputs);
  Expected<std::vector<SymTensor>> target_terms = evaluator.run(target, inputs);
  for (const auto* terms : {&source_terms, &target_terms}) {
    if (!*terms) {
      return Status::errorf("{}: rule '{}' cannot be proved: {}", rule.origin, rule.name,
                            terms->status().message());
    }
  }
  const std::vector<SymTensor>& want = *source_terms;
  const std::vector<SymTensor>& got = *target_terms;
  z3::solver solver(context);
  if (auto exp = evaluator.functions().find("exp"); exp != evaluator.functions().end()) {
    for (const z3::expr& axiom : exp_axioms(evaluator.applications("exp"), exp->second)) {
      solver.add(axiom);
    }
  }
  // An element whose difference Z3's simplifier writes as a sum of monomials that cancels to
  // 0 is equal for every value of the unknowns (a convolution's sums with a folded scale, where
  // the solver times out on the whole query); the rest go to the solver.
  z3::params sum_of_monomials(context);
  sum_of_monomials.set("som", true);
  sum_of_monomials.set("som_blowup", 1000000u);
  z3::expr_vector differs(context);
  for (size_t k = 0; k < want.size(); ++k) {
    for (size_t i = 0; i < want[k].elements.size(); ++i) {
      const z3::expr difference = (want[k].elements[i] - got[k].elements[i]).simplify(sum_of_monomials);
      if (difference.is_numeral() && difference.get_numeral_int64() == 0) continue;
      differs.push_back(want[k].elements[i] != got[k].elements[i]);
    }
  }
  if (differs.empty()) return Status::ok();
  std::vector<std::string> shapes;  // "%a: f32[2,3]"
  for (const Value* input : source.inputs()) {
    shapes.push_back(fmt::format("{}: {}", print_value_ref(*input), input->type().to_string()));
  }
  const auto refuted = [&] {
    rejection = Rejection::refuted;
    return Status::errorf("{}: rule '{}' does not hold with {}", rule.origin, rule.name,
                          fmt::join(shapes, ", "));
  };
  const auto undecided = [&](const std::string& reason) {
    rejection = Rejection::undecided;
    return Status::errorf("{}: rule '{}': Z3 could not decide it with {} ({})", rule.origin,
                          rule.name, fmt::join(shapes, ", "), reason);
  };
  // Whether any element can differ, all at once: one query, 5 s.
  solver.set("timeout", 5000u);  // milliseconds
  solver.push();
  solver.add(z3::mk_or(differs));
  const z3::check_result whole = solver.check();
  if (whole == z3::unsat) return Status::ok();
  if (whole == z3::sat) return refuted();
  solver.pop();
  // Undecided at once: each element alone, a far smaller query, within 20 s for them all.
  // relu(x + x) = 2 relu(x) over a [5, 6, 7, 7] image timed out as one disjunction of 1,470
  // if-then-else terms; element by element each is linear arithmetic of one unknown.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  solver.set("timeout", 1000u);
  for (const z3::expr& element_differs : differs) {
    if (std::chrono::steady_clock::now() > deadline) {
      return undecided("the element-by-element proof ran past 20 s");
    }
    solver.push();
    solver.add(element_differs);
    const z3::check_result one = solver.check();
    if (one == z3::sat) return refuted();
    if (one != z3::unsat) return undecided(solver.reason_unknown());
    solver.pop();
  }
  return Status::ok();
}

}  // namespace

Expected<Proof> prove_rule(const Rule& rule, const ProofOptions& options, Rejection* rejection) {
  if (!rule.instances.empty()) {
    Proof total;
    for (const Rule& instance : rule.instances) {
      KILN_ASSIGN_OR_RETURN(const Proof proof, prove_rule(instance, options, rejection));
      total.instances += proof.instances;
      total.skipped += proof.skipped;
    }
    return total;
  }
  Rejection ignored = Rejection::unsupported;
  Rejection& why = rejection != nullptr ? *rejection : ignored;
  why = Rejection::unsupported;
  for (const ConstantVariable& constant : rule.constants) {
    if (!constant.attribute.empty()) {
      return Status::errorf("{}: rule '{}' gives a constant's value to the attribute '{}', which "
                            "the prover does not follow",
                            rule.origin, rule.name, constant.attribute);
    }
  }
  const std::vector<int64_t> extents = example_extents(rule);
  const std::vector<std::map<std::string, AttrValue>> attribute_sets = attribute_assignments(rule);
  double assignments = 1;
  for (size_t e = 0; e < extents.size(); ++e) assignments *= options.max_extent;
  const double instances = (assignments + 1) * static_cast<double>(attribute_sets.size());
  if (instances > options.max_instances) {
    return Status::errorf("{}: rule '{}' has {} distinct extents and {} attribute assignments: "
                          "{} instances, over the limit of {}",
                          rule.origin, rule.name, extents.size(), attribute_sets.size(), instances,
                          options.max_instances);
  }
  std::vector<std::map<int64_t, int64_t>> maps = {{}};  // the example itself first
  for (int64_t a = 0; a < static_cast<int64_t>(assignments); ++a) {
    std::map<int64_t, int64_t> map;
    int64_t rest = a;
    for (int64_t extent : extents) {
      map.emplace(extent, 1 + rest % options.max_extent);
      rest /= options.max_extent;
    }
    maps.push_back(std::move(map));
  }
  Proof proof;
  for (size_t a = 0; a < attribute_sets.size(); ++a) {
    for (const std::map<int64_t, int64_t>& map : maps) {
      std::optional<std::pair<Graph, Graph>> instance = instantiate(rule, map, attribute_sets[a]);
      if (!instance) {
        if (map.empty() && a == 0) {
          return Status::errorf("{}: rule '{}' does not apply to its own example", rule.origin,
                                rule.name);
        }
        ++proof.skipped;
        continue;
      }
      KILN_RETURN_IF_ERROR(prove_instance(rule, instance->first, instance->second, why));
      ++proof.instances;
    }
  }
  return proof;
}

Status prove_axioms_numerically() {
  for (int i = 0; i < 100; ++i) {
    const double x = std::sin(i * 1.7) * 3;
    const double y = std::cos(i * 0.9) * 3;
    const double tolerance = 1e-12 * std::exp(std::fabs(x) + std::fabs(y));
    if (std::fabs(std::exp(x + y) - std::exp(x) * std::exp(y)) > tolerance ||
        std::fabs(std::exp(x - y) - std::exp(x) / std::exp(y)) > tolerance) {
      return Status::errorf("an axiom of exp does not hold at x = {}, y = {}", x, y);
    }
  }
  return Status::ok();
}

}  // namespace kiln::subst
