#include "subst/rule.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/dtype.h"
#include "ir/parser.h"
#include "ir/printer.h"

namespace kiln::subst {
namespace {

// A cursor over the rule file for the words between its graphs (`rule NAME`, `extents ...`);
// the graphs themselves are read by the IR parser, from the cursor on.
class Scanner {
 public:
  Scanner(std::string_view text, std::string_view filename) : text_(text), filename_(filename) {}

  bool at_end() {
    skip_blanks();
    return pos_ >= text_.size();
  }
  // "FILE:LINE:COLUMN" of the cursor.
  std::string where() const {
    const std::string_view before = text_.substr(0, pos_);
    const size_t line_start = before.rfind('\n');
    return fmt::format("{}:{}:{}", filename_, std::ranges::count(before, '\n') + 1,
                       pos_ - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1);
  }
  int line() const { return static_cast<int>(std::ranges::count(text_.substr(0, pos_), '\n')) + 1; }

  // Whether the next word is `word`, consuming it if so.
  bool accept(std::string_view word) {
    skip_blanks();
    const size_t end = pos_ + word.size();
    if (text_.substr(pos_, word.size()) != word ||
        (end < text_.size() && !std::isspace(static_cast<unsigned char>(text_[end])))) {
      return false;
    }
    pos_ = end;
    return true;
  }

  // The rest of the line, without its comment.
  std::string rest_of_line() {
    const size_t begin = pos_;
    while (pos_ < text_.size() && text_[pos_] != '\n' && text_.substr(pos_, 2) != "//") ++pos_;
    return std::string(text_.substr(begin, pos_ - begin));
  }

  // A run of characters up to the next blank.
  std::string word() {
    skip_blanks();
    const size_t begin = pos_;
    while (pos_ < text_.size() && !std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    return std::string(text_.substr(begin, pos_ - begin));
  }

  // One graph in IR text, read by the IR parser from the cursor, which moves past it.
  Expected<Graph> graph() { return parse_graph_at(text_, pos_, filename_); }

 private:
  void skip_blanks() {
    while (pos_ < text_.size()) {
      if (std::isspace(static_cast<unsigned char>(text_[pos_]))) {
        ++pos_;
      } else if (text_.substr(pos_, 2) == "//") {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view text_;
  std::string_view filename_;
  size_t pos_ = 0;
};

bool valid_rule_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  }
  return true;
}

// "%w1[1], %w2[1]": the declared extents, checked against the source's parameters.
Status parse_extents(const std::string& text, const std::string& where, Rule& rule) {
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t first = item.find_first_not_of(" \t");
    const size_t last = item.find_last_not_of(" \t");
    item = first == std::string::npos ? "" : item.substr(first, last - first + 1);
    const size_t open = item.find('[');
    if (item.size() < 4 || item[0] != '%' || open == std::string::npos || item.back() != ']') {
      return Status::errorf("{}: an extent is written %VARIABLE[AXIS], not '{}'", where, item);
    }
    const std::string name = item.substr(1, open - 1);
    const std::string axis_text = item.substr(open + 1, item.size() - open - 2);
    const auto& params = rule.source.inputs();
    const auto param = std::find_if(params.begin(), params.end(),
                                    [&](const Value* p) { return p->name() == name; });
    if (param == params.end()) {
      return Status::errorf("{}: the extent '{}' names no parameter of the source", where, item);
    }
    const int rank = (*param)->shape().rank();
    if (axis_text.empty() || axis_text.size() > 2 ||
        !std::all_of(axis_text.begin(), axis_text.end(), ::isdigit) || std::stoi(axis_text) >= rank) {
      return Status::errorf("{}: '{}' is not an axis of %{} (rank {})", where, axis_text, name,
                            rank);
    }
    const int axis = std::stoi(axis_text);
    const int64_t example = (*param)->shape().dims()[static_cast<size_t>(axis)];
    if (example < 2) {
      return Status::errorf("{}: the example extent of '{}' is {}; a declared extent must be at "
                            "least 2 to be told apart from axes and flags",
                            where, item, example);
    }
    for (const SymbolicExtent& other : rule.extents) {
      if (other.example == example) {
        return Status::errorf("{}: '{}' has the example extent {} of an extent declared before "
                              "it; give them distinct example extents",
                              where, item, example);
      }
    }
    rule.extents.push_back({static_cast<size_t>(param - params.begin()), axis, example});
  }
  if (rule.extents.empty()) return Status::errorf("{}: 'extents' lists no extent", where);
  return Status::ok();
}

// "[1, 2]" or "3": an integer list or an integer.
std::optional<AttrValue> parse_attribute_value(std::string text) {
  const auto trim = [](std::string t) {
    const size_t first = t.find_first_not_of(" \t");
    const size_t last = t.find_last_not_of(" \t");
    return first == std::string::npos ? std::string() : t.substr(first, last - first + 1);
  };
  const auto integer = [](const std::string& t) -> std::optional<int64_t> {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || end != t.data() + t.size() || t.empty()) return std::nullopt;
    return v;
  };
  text = trim(text);
  if (text.empty() || text.front() != '[') {
    const std::optional<int64_t> v = integer(text);
    return v ? std::optional<AttrValue>(AttrValue(*v)) : std::nullopt;
  }
  if (text.back() != ']') return std::nullopt;
  std::vector<int64_t> values;
  std::stringstream items(text.substr(1, text.size() - 2));
  std::string item;
  while (std::getline(items, item, ',')) {
    const std::optional<int64_t> v = integer(trim(item));
    if (!v) return std::nullopt;
    values.push_back(*v);
  }
  return AttrValue(std::move(values));
}

// "strides = [1, 1] | [2, 2]": an attribute choice, checked against the source's nodes.
Status parse_attribute_choice(const std::string& text, const std::string& where, Rule& rule) {
  const size_t equals = text.find('=');
  if (equals == std::string::npos) {
    return Status::errorf("{}: an attribute choice is written NAME = VALUE | VALUE ...", where);
  }
  AttributeChoice choice;
  std::stringstream name(text.substr(0, equals));
  name >> choice.name;
  std::stringstream alternatives(text.substr(equals + 1));
  std::string alternative;
  while (std::getline(alternatives, alternative, '|')) {
    std::optional<AttrValue> value = parse_attribute_value(alternative);
    if (!value) {
      return Status::errorf("{}: '{}' is not an integer or a list of integers", where,
                            alternative);
    }
    choice.values.push_back(std::move(*value));
  }
  for (const AttributeChoice& other : rule.attribute_choices) {
    if (other.name == choice.name) {
      return Status::errorf("{}: a second choice for the attribute '{}'", where, choice.name);
    }
  }
  bool found = false;
  for (const Node* node : rule.source.nodes()) {
    const AttrValue* value = node->attrs().find(choice.name);
    if (value == nullptr) continue;
    found = true;
    if (std::ranges::find(choice.values, *value) == choice.values.end()) {
      return Status::errorf("{}: the source's %{} has {} = {}, which is not one of the choices",
                            where, node->output()->name(), choice.name, print_attr_value(*value));
    }
  }
  if (!found) {
    return Status::errorf("{}: no node of the source has an attribute '{}'", where, choice.name);
  }
  rule.attribute_choices.push_back(std::move(choice));
  return Status::ok();
}

// "%eps as epsilon" or "%c": a constant variable, checked against the source's parameters and,
// with an attribute, the target's nodes (which must agree on its example value).
Status parse_constant(const std::string& text, const std::string& where, Rule& rule) {
  std::stringstream words(text);
  std::string variable, as, attribute, extra;
  words >> variable >> as >> attribute >> extra;
  if (variable.size() < 2 || variable[0] != '%' || !extra.empty() ||
      (!as.empty() && (as != "as" || attribute.empty()))) {
    return Status::errorf("{}: a constant is written 'constant %VARIABLE' or 'constant %VARIABLE "
                          "as ATTRIBUTE', not '{}'", where, text);
  }
  const auto& params = rule.source.inputs();
  const auto param = std::ranges::find(params, variable.substr(1), &Value::name);
  if (param == params.end()) {
    return Status::errorf("{}: the constant '{}' names no parameter of the source", where,
                          variable);
  }
  const auto index = static_cast<size_t>(param - params.begin());
  const auto& declared = rule.constants;
  if (std::ranges::find(declared, index, &ConstantVariable::variable) != declared.end()) {
    return Status::errorf("{}: '{}' is declared a constant twice", where, variable);
  }
  if (!attribute.empty()) {
    std::optional<double> example;
    for (const Node* node : rule.target.nodes()) {
      const AttrValue* value = node->attrs().find(attribute);
      if (value == nullptr) continue;
      if (value->kind() != AttrKind::floating) {
        return Status::errorf("{}: the target's %{} has a '{}' that is not a float", where,
                              node->output()->name(), attribute);
      }
      if (example && *example != value->as_float()) {
        return Status::errorf("{}: the target's nodes give '{}' different example values", where,
                              attribute);
      }
      example = value->as_float();
    }
    if (!example) {
      return Status::errorf("{}: no node of the target has an attribute '{}'", where, attribute);
    }
  }
  rule.constants.push_back({index, attribute});
  return Status::ok();
}

Status check_rule_shape(const Rule& rule);

// The float dtype of every floating value of `rule`'s example, or why there is not one.
Expected<DType> example_float_dtype(const Rule& rule) {
  std::optional<DType> found;
  for (const Graph* graph : {&rule.source, &rule.target}) {
    std::vector<const Value*> values(graph->inputs().begin(), graph->inputs().end());
    for (const Node* node : graph->nodes()) {
      values.insert(values.end(), node->outputs().begin(), node->outputs().end());
    }
    for (const Value* value : values) {
      if (!is_floating(value->dtype())) continue;
      if (found && *found != value->dtype()) {
        return Status::errorf("the example mixes {} and {}", dtype_name(*found),
                              dtype_name(value->dtype()));
      }
      found = value->dtype();
    }
  }
  if (!found) return Status::error("the example has no floating value");
  return *found;
}

// "f32 | bf16 | f16": the float dtypes the rule matches at, the example's moved first.
Status parse_dtypes(const std::string& text, const std::string& where, Rule& rule) {
  if (!rule.dtypes.empty()) return Status::errorf("{}: a second 'dtypes' line", where);
  Expected<DType> example = example_float_dtype(rule);
  if (!example) return example.status().with_context(fmt::format("{}: dtypes", where));
  std::stringstream alternatives(text);
  std::string alternative;
  while (std::getline(alternatives, alternative, '|')) {
    std::stringstream word(alternative);
    std::string name, extra;
    word >> name >> extra;
    const std::optional<DType> dtype = parse_dtype(name);
    if (!dtype || !is_floating(*dtype) || !extra.empty()) {
      return Status::errorf("{}: '{}' is not a float dtype", where, name + extra);
    }
    if (std::ranges::find(rule.dtypes, *dtype) != rule.dtypes.end()) {
      return Status::errorf("{}: {} is listed twice", where, name);
    }
    rule.dtypes.push_back(*dtype);
  }
  const auto own = std::ranges::find(rule.dtypes, *example);
  if (own == rule.dtypes.end()) {
    return Status::errorf("{}: the example's dtype {} is not listed", where, dtype_name(*example));
  }
  std::rotate(rule.dtypes.begin(), own, own + 1);
  return Status::ok();
}

// "%x 3 | 2 | 4": variables of one example rank and the ranks they match at, the example's
// moved first.
Status parse_ranks(const std::string& text, const std::string& where, Rule& rule) {
  if (!rule.ranks.variables.empty()) return Status::errorf("{}: a second 'ranks' line", where);
  std::stringstream words(text);
  std::string word;
  std::string ranks_text;
  const auto& params = rule.source.inputs();
  while (words >> word) {
    if (word[0] != '%') {
      ranks_text += word + " ";
      continue;
    }
    if (!ranks_text.empty()) {
      return Status::errorf("{}: 'ranks' lists its variables before the ranks", where);
    }
    const auto param = std::ranges::find(params, word.substr(1), &Value::name);
    if (param == params.end()) {
      return Status::errorf("{}: '{}' names no parameter of the source", where, word);
    }
    rule.ranks.variables.push_back(static_cast<size_t>(param - params.begin()));
  }
  if (rule.ranks.variables.empty()) {
    return Status::errorf("{}: ranks are written 'ranks %VARIABLE... RANK | RANK ...'", where);
  }
  const int example = params[rule.ranks.variables[0]]->shape().rank();
  for (const size_t variable : rule.ranks.variables) {
    if (params[variable]->shape().rank() != example) {
      return Status::errorf("{}: the variables of 'ranks' differ in their example's rank", where);
    }
  }
  std::stringstream alternatives(ranks_text);
  std::string alternative;
  while (std::getline(alternatives, alternative, '|')) {
    const std::optional<AttrValue> value = parse_attribute_value(alternative);
    if (!value || value->kind() != AttrKind::integer || value->as_int() < 1 ||
        value->as_int() > 8) {
      std::stringstream trimmed(alternative);
      std::string shown;
      trimmed >> shown;
      return Status::errorf("{}: '{}' is not a rank from 1 to 8", where, shown);
    }
    const int rank = static_cast<int>(value->as_int());
    if (std::ranges::find(rule.ranks.ranks, rank) != rule.ranks.ranks.end()) {
      return Status::errorf("{}: rank {} is listed twice", where, rank);
    }
    rule.ranks.ranks.push_back(rank);
  }
  const auto own = std::ranges::find(rule.ranks.ranks, example);
  if (own == rule.ranks.ranks.end()) {
    return Status::errorf("{}: the example's rank {} is not listed", where, example);
  }
  std::rotate(rule.ranks.ranks.begin(), own, own + 1);
  return Status::ok();
}

// How one instance of a rule retypes its example.
struct Retyping {
  DType from = DType::f32;  // the example's float dtype
  DType to = DType::f32;
  std::vector<bool> ranked;           // per source parameter: whether its rank changes
  std::vector<int64_t> leading_dims;  // the instance's leading extents where the rank grows
  int rank_change = 0;                // the instance's rank less the example's

  TensorType type(TensorType type, bool is_ranked) const {
    if (type.dtype == from) type.dtype = to;
    if (!is_ranked || rank_change == 0) return type;
    std::vector<int64_t> dims = type.shape.dims();
    if (rank_change < 0) {
      dims.erase(dims.begin(), dims.begin() + (-rank_change));
    } else {
      dims.insert(dims.begin(), leading_dims.begin(), leading_dims.begin() + rank_change);
    }
    type.shape = Shape(std::move(dims));
    return type;
  }

  // A constant's value and a dtype attribute follow the dtype; constants are rounded to it.
  Attrs attrs(const Attrs& attrs) const {
    Attrs retyped = attrs;
    for (const auto& [name, value] : attrs.entries()) {
      if (value.kind() == AttrKind::dtype && value.as_dtype() == from) retyped.set(name, to);
      if (value.kind() == AttrKind::tensor && value.as_tensor().dtype == from) {
        const Array& example = value.as_tensor();
        retyped.set(name, Array(to, example.shape, example.data));
      }
    }
    return retyped;
  }
};

// `graph` built again, node by node, from parameters of the retyped types: each node's types
// are inferred anew.
Expected<Graph> retype_graph(const Graph& graph, const Retyping& retyping) {
  Graph built(graph.name());
  std::map<const Value*, Value*> value_of;
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    const Value* input = graph.inputs()[i];
    value_of[input] =
        built.add_input(retyping.type(input->type(), retyping.ranked[i]), input->name());
  }
  for (const Node* node : graph.nodes()) {
    std::vector<Value*> inputs;
    for (const Value* input : node->inputs()) inputs.push_back(value_of.at(input));
    std::vector<std::string> names;
    for (const Value* output : node->outputs()) names.push_back(output->name());
    KILN_ASSIGN_OR_RETURN(Node * made, built.add_node(node->op(), std::move(inputs),
                                                      retyping.attrs(node->attrs()), names));
    for (int k = 0; k < node->num_outputs(); ++k) value_of[node->output(k)] = made->output(k);
  }
  std::vector<Value*> outputs;
  for (const Value* output : graph.outputs()) outputs.push_back(value_of.at(output));
  built.set_outputs(std::move(outputs));
  return built;
}

// `rule` at `dtype` and `rank` (of its ranked variables).
Expected<Rule> instantiate(const Rule& rule, DType dtype, int rank) {
  const auto& params = rule.source.inputs();
  Retyping retyping;
  retyping.from = rule.dtypes.empty() ? dtype : rule.dtypes[0];
  retyping.to = dtype;
  retyping.ranked.assign(params.size(), false);
  for (const size_t variable : rule.ranks.variables) retyping.ranked[variable] = true;
  if (!rule.ranks.variables.empty()) {
    retyping.rank_change = rank - rule.ranks.ranks[0];
    // New leading extents, distinct from the declared ones, which attributes may name.
    for (const int64_t extent : {7, 11, 13, 17, 19, 23, 29, 31}) {
      if (std::ranges::find(rule.extents, extent, &SymbolicExtent::example) == rule.extents.end()) {
        retyping.leading_dims.push_back(extent);
      }
    }
  }
  std::vector<std::string> label;
  if (!rule.dtypes.empty()) label.emplace_back(dtype_name(dtype));
  if (!rule.ranks.variables.empty()) label.push_back(fmt::format("rank {}", rank));
  Rule instance;
  instance.name = rule.name;
  instance.origin = fmt::format("{} ({})", rule.origin, fmt::join(label, ", "));
  instance.attribute_choices = rule.attribute_choices;
  instance.constants = rule.constants;
  for (SymbolicExtent extent : rule.extents) {
    if (retyping.ranked[extent.variable]) extent.axis += retyping.rank_change;
    if (extent.axis < 0) {
      return Status::errorf("{}: rule '{}': rank {} drops the declared extent of %{}", rule.origin,
                            rule.name, rank, params[extent.variable]->name());
    }
    instance.extents.push_back(extent);
  }
  const auto context = fmt::format("{}: rule '{}'", instance.origin, rule.name);
  Expected<Graph> source = retype_graph(rule.source, retyping);
  if (!source) return source.status().with_context(context);
  Expected<Graph> target = retype_graph(rule.target, retyping);
  if (!target) return target.status().with_context(context);
  instance.source = std::move(*source);
  instance.target = std::move(*target);
  KILN_RETURN_IF_ERROR(check_rule_shape(instance));
  return instance;
}

// The instances of a rule with dtypes or ranks (rule.h), the example first.
Status instantiate_all(Rule& rule) {
  if (rule.dtypes.empty() && rule.ranks.variables.empty()) return Status::ok();
  std::vector<DType> dtypes = rule.dtypes;
  if (dtypes.empty()) dtypes.push_back(DType::f32);
  std::vector<int> ranks = rule.ranks.ranks;
  if (ranks.empty()) ranks.push_back(0);
  for (const DType dtype : dtypes) {
    for (const int rank : ranks) {
      KILN_ASSIGN_OR_RETURN(Rule instance, instantiate(rule, dtype, rank));
      rule.instances.push_back(std::move(instance));
    }
  }
  return Status::ok();
}

// The agreements parse_rules promises (rule.h).
Status check_rule_shape(const Rule& rule) {
  const Graph& source = rule.source;
  const Graph& target = rule.target;
  const auto fail = [&](std::string message) {
    return Status::errorf("{}: rule '{}': {}", rule.origin, rule.name, message);
  };
  if (source.inputs().size() != target.inputs().size()) {
    return fail(fmt::format("the source has {} parameters and the target {}",
                            source.inputs().size(), target.inputs().size()));
  }
  for (size_t i = 0; i < source.inputs().size(); ++i) {
    const Value& s = *source.inputs()[i];
    const Value& t = *target.inputs()[i];
    if (s.name() != t.name() || s.type() != t.type()) {
      return fail(fmt::format("parameter {} is %{}: {} in the source but %{}: {} in the target",
                              i, s.name(), s.type().to_string(), t.name(), t.type().to_string()));
    }
    if (s.users().empty()) return fail(fmt::format("the source does not use %{}", s.name()));
  }
  if (source.num_nodes() == 0) return fail("the source has no node to match");
  for (const Node* node : source.nodes()) {
    if (std::none_of(node->outputs().begin(), node->outputs().end(), [&](const Value* value) {
          return !value->users().empty() || source.is_output(value);
        })) {
      return fail(fmt::format("the source computes %{} and neither reads nor returns it",
                              node->output(0)->name()));
    }
  }
  if (source.outputs().size() != target.outputs().size()) {
    return fail(fmt::format("the source returns {} values and the target {}",
                            source.outputs().size(), target.outputs().size()));
  }
  std::set<const Value*> returned;
  for (size_t k = 0; k < source.outputs().size(); ++k) {
    const Value& s = *source.outputs()[k];
    const Value& t = *target.outputs()[k];
    if (s.producer() == nullptr) {
      return fail(fmt::format("source result {} is the parameter %{}, not a computed value", k,
                              s.name()));
    }
    if (!returned.insert(&s).second) {
      return fail(fmt::format("the source returns %{} twice", s.name()));
    }
    if (s.type() != t.type()) {
      return fail(fmt::format("result {} is {} in the source but {} in the target", k,
                              s.type().to_string(), t.type().to_string()));
    }
  }
  return Status::ok();
}

// How far two results of a rule may differ: the interpreter rounds every value to its dtype,
// so a rule that reassociates (a b + a c = a (b + c)) differs by a few roundings; 64 units in
// the last place, relative to the value's magnitude (at least 1). A wrong rule misses by far
// more.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64: return 64 * 0x1p-52;
    case DType::f32: return 64 * 0x1p-23;
    case DType::f16: return 64 * 0x1p-10;
    case DType::bf16: return 64 * 0x1p-7;
    default: return 0;  // integers and bool: exact
  }
}

}  // namespace

Expected<std::vector<Rule>> parse_rules(std::string_view text, std::string_view filename) {
  Scanner scanner(text, filename);
  std::vector<Rule> rules;
  std::set<std::string> names;
  while (!scanner.at_end()) {
    const std::string origin = scanner.where();
    const int line = scanner.line();
    if (const std::string keyword = scanner.word(); keyword != "rule") {
      return Status::errorf("{}: expected 'rule NAME', found '{}'", origin, keyword);
    }
    Rule rule;
    rule.name = scanner.word();
    rule.origin = fmt::format("{}:{}", filename, line);
    if (rule.name.empty()) return Status::errorf("{}: 'rule' needs a name", origin);
    if (!valid_rule_name(rule.name)) {
      return Status::errorf("{}: a rule's name is letters, digits, '-' and '_', not '{}'", origin,
                            rule.name);
    }
    if (!names.insert(rule.name).second) {
      return Status::errorf("{}: a second rule named '{}'", origin, rule.name);
    }
    std::string extents, extents_where;
    if (scanner.accept("extents")) {
      extents_where = scanner.where();
      extents = scanner.rest_of_line();
    }
    // (text, where)
    std::vector<std::pair<std::string, std::string>> choices, constants, dtypes, ranks;
    while (true) {
      auto* lines = scanner.accept("attributes") ? &choices
                    : scanner.accept("constant") ? &constants
                    : scanner.accept("dtypes")   ? &dtypes
                    : scanner.accept("ranks")    ? &ranks
                                                 : nullptr;
      if (lines == nullptr) break;
      const std::string where = scanner.where();
      lines->emplace_back(scanner.rest_of_line(), where);
    }
    for (Graph* graph : {&rule.source, &rule.target}) {
      KILN_ASSIGN_OR_RETURN(*graph, scanner.graph());
    }
    KILN_RETURN_IF_ERROR(check_rule_shape(rule));
    if (!extents_where.empty()) KILN_RETURN_IF_ERROR(parse_extents(extents, extents_where, rule));
    for (const auto& [choice, where] : choices) {
      KILN_RETURN_IF_ERROR(parse_attribute_choice(choice, where, rule));
    }
    for (const auto& [constant, where] : constants) {
      KILN_RETURN_IF_ERROR(parse_constant(constant, where, rule));
    }
    for (const auto& [listed, where] : dtypes) {
      KILN_RETURN_IF_ERROR(parse_dtypes(listed, where, rule));
    }
    for (const auto& [listed, where] : ranks) KILN_RETURN_IF_ERROR(parse_ranks(listed, where, rule));
    KILN_RETURN_IF_ERROR(instantiate_all(rule));
    rules.push_back(std::move(rule));
  }
  return rules;
}

Expected<std::vector<Rule>> read_rules_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) return Status::errorf("cannot read the rule file '{}'", path);
  std::stringstream text;
  text << file.rdbuf();
  return parse_rules(text.str(), path);
}

std::span<const Rule> instances_of(const Rule& rule) {
  if (rule.instances.empty()) return {&rule, 1};
  return rule.instances;
}

std::optional<double> splat_constant(const Value& value) {
  const Node* producer = value.producer();
  if (producer == nullptr || producer->op() != Op::constant) return std::nullopt;
  const std::vector<double>& data = producer->attrs().get_tensor("value").data;
  if (data.empty() || std::ranges::any_of(data, [&](double v) { return v != data[0]; })) {
    return std::nullopt;
  }
  return data[0];
}

Status check_rule_numerically(const Rule& rule, int trials) {
  if (!rule.instances.empty()) {
    for (const Rule& instance : rule.instances) {
      KILN_RETURN_IF_ERROR(check_rule_numerically(instance, trials));
    }
    return Status::ok();
  }
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<Array> inputs =
        random_inputs(rule.source, {.seed = static_cast<uint64_t>(trial) + 1});
    for (const ConstantVariable& constant : rule.constants) {
      if (constant.attribute.empty()) continue;
      // Every target node with the attribute holds the same example value (parse_constant).
      const auto holder = std::ranges::find_if(rule.target.nodes(), [&](const Node* node) {
        return node->attrs().contains(constant.attribute);
      });
      std::ranges::fill(inputs[constant.variable].data,
                        (*holder)->attrs().get_float(constant.attribute));
    }
    KILN_ASSIGN_OR_RETURN(const std::vector<Array> want, interpret(rule.source, inputs));
    KILN_ASSIGN_OR_RETURN(const std::vector<Array> got, interpret(rule.target, inputs));
    for (size_t k = 0; k < want.size(); ++k) {
      const double within = tolerance(rule.source.outputs()[k]->dtype());
      for (int64_t i = 0; i < want[k].size(); ++i) {
        const double a = want[k][i];
        const double b = got[k][i];
        const bool same = a == b || std::fabs(a - b) <= within * std::max(1.0, std::fabs(a)) ||
                          (std::isnan(a) && std::isnan(b));
        if (!same) {
          return Status::errorf("{}: rule '{}' is wrong: on random inputs {} result {} element {} "
                                "is {} from the source and {} from the target",
                                rule.origin, rule.name, trial + 1, k, i, a, b);
        }
      }
    }
  }
  return Status::ok();
}

}  // namespace kiln::subst
