#include "ir/parser.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <optional>
#include <string_view>

#include "ir/verifier.h"

namespace kiln {
namespace {

enum class TokenKind {
  end,
  identifier,  // graph, return, op names, attribute names, dtypes, true, false, inf, nan
  value_name,  // %name
  graph_name,  // @name
  integer,
  floating,
  string,
  punct,       // one of ( ) { } [ ] < > , : = -
  error,       // malformed input; text is the full located message
};

struct Token {
  TokenKind kind = TokenKind::end;
  std::string text;  // identifier or name (unquoted), string contents, number text, punct char
  int line = 1;
  int column = 1;
  size_t offset = 0;  // where the token starts in the text
};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '.';
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  // Reads `text` from `offset`, counting lines and columns from its start.
  Lexer(std::string_view text, std::string_view filename, size_t offset = 0)
      : text_(text), filename_(filename) {
    while (pos_ < offset && pos_ < text_.size()) advance();
  }

  // The next token; malformed input gives an error token, reported when the parser looks at it.
  Token next() {
    Expected<Token> token = read_token();
    if (token) return std::move(*token);
    Token error;
    error.kind = TokenKind::error;
    error.text = token.status().message();
    return error;
  }

  Status error_at(const Token& token, std::string_view message) const {
    if (token.kind == TokenKind::error) return Status::error(token.text);
    return Status::errorf("{}:{}:{}: {}", filename_, token.line, token.column, message);
  }

 private:
  Expected<Token> read_token() {
    skip_space_and_comments();
    Token token;
    token.line = line_;
    token.column = column_;
    token.offset = pos_;
    if (pos_ >= text_.size()) return token;
    const char c = text_[pos_];
    if (c == '%' || c == '@') {
      advance();
      token.kind = c == '%' ? TokenKind::value_name : TokenKind::graph_name;
      if (pos_ < text_.size() && text_[pos_] == '"') {
        KILN_ASSIGN_OR_RETURN(token.text, read_string());
        // A graph may be named "" (the printer writes @""); a value may not, since the Graph
        // replaces an empty value name with a generated one.
        if (c == '%' && token.text.empty()) {
          return error_at(token, "a value name must not be empty");
        }
        return token;
      }
      token.text = read_while(is_name_char);
      if (token.text.empty()) return error_at(token, fmt::format("expected a name after '{}'", c));
      return token;
    }
    if (c == '"') {
      token.kind = TokenKind::string;
      KILN_ASSIGN_OR_RETURN(token.text, read_string());
      return token;
    }
    if (is_digit(c)) return read_number(token);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
      token.kind = TokenKind::identifier;
      token.text = read_while(is_name_char);
      return token;
    }
    if (std::string_view("(){}[]<>,:=-").find(c) != std::string_view::npos) {
      advance();
      token.kind = TokenKind::punct;
      token.text = std::string(1, c);
      return token;
    }
    return error_at(token, c >= 0x20 && c < 0x7F
                               ? fmt::format("unexpected character '{}'", c)
                               : fmt::format("unexpected byte 0x{:02X}",
                                             static_cast<unsigned char>(c)));
  }

  void advance() {
    if (text_[pos_] == '\n') {
      ++line_;
      column_ = 1;
    } else {
      ++column_;
    }
    ++pos_;
  }

  void skip_space_and_comments() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance();
      } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
        while (pos_ < text_.size() && text_[pos_] != '\n') advance();
      } else {
        return;
      }
    }
  }

  template <typename Pred>
  std::string read_while(Pred pred) {
    const size_t start = pos_;
    while (pos_ < text_.size() && pred(text_[pos_])) advance();
    return std::string(text_.substr(start, pos_ - start));
  }

  static int hex_value(char c) {
    if (is_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Reads a quoted string starting at the opening quote; handles \" \\ \n \t \xHH.
  Expected<std::string> read_string() {
    Token start;
    start.line = line_;
    start.column = column_;
    advance();  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') {
        return error_at(start, "unterminated string");
      }
      const char c = text_[pos_];
      advance();
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) return error_at(start, "unterminated string");
      const char escape = text_[pos_];
      advance();
      switch (escape) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'x': {
          const int hi = pos_ < text_.size() ? hex_value(text_[pos_]) : -1;
          const int lo = pos_ + 1 < text_.size() ? hex_value(text_[pos_ + 1]) : -1;
          if (hi < 0 || lo < 0) return error_at(start, "bad \\x escape in string");
          advance();
          advance();
          out += static_cast<char>(hi * 16 + lo);
          break;
        }
        default: return error_at(start, fmt::format("unknown escape '\\{}' in string", escape));
      }
    }
  }

  // digits [. digits] [(e|E) [+-] digits]
  Expected<Token> read_number(Token token) {
    token.kind = TokenKind::integer;
    std::string text = read_while(is_digit);
    if (pos_ < text_.size() && text_[pos_] == '.') {
      token.kind = TokenKind::floating;
      advance();
      text += '.';
      text += read_while(is_digit);
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      token.kind = TokenKind::floating;
      text += 'e';
      advance();
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) {
        text += text_[pos_];
        advance();
      }
      const std::string exponent = read_while(is_digit);
      if (exponent.empty()) return error_at(token, "malformed number: missing exponent digits");
      text += exponent;
    }
    if (pos_ < text_.size() && is_name_char(text_[pos_])) {
      return error_at(token, fmt::format("malformed number '{}{}'", text, text_[pos_]));
    }
    token.text = std::move(text);
    return token;
  }

  std::string_view text_;
  std::string_view filename_;
  size_t pos_ = 0;
  int line_ = 1;
  int column_ = 1;
};

class Parser {
 public:
  Parser(std::string_view text, std::string_view filename, size_t offset = 0)
      : lexer_(text, filename, offset) {}

  // One graph; with `end`, the text may go on after it and *end receives the offset just past
  // its closing brace, otherwise the graph must be the whole text.
  Expected<Graph> parse(size_t* end = nullptr) {
    advance();
    KILN_RETURN_IF_ERROR(expect_keyword("graph"));
    if (token_.kind != TokenKind::graph_name) {
      return error(fmt::format("expected graph name '@name', found {}", describe_token()));
    }
    Graph graph(token_.text);
    advance();
    KILN_RETURN_IF_ERROR(parse_params(graph));
    KILN_RETURN_IF_ERROR(expect_punct("{"));
    while (!is_keyword("return")) {
      if (token_.kind == TokenKind::end || is_punct("}")) {
        return error(fmt::format("missing 'return' before {}", describe_token()));
      }
      KILN_RETURN_IF_ERROR(parse_statement(graph));
    }
    advance();
    std::vector<Value*> outputs;
    do {
      KILN_ASSIGN_OR_RETURN(Value * output, parse_value_use(graph));
      outputs.push_back(output);
    } while (accept_punct(","));
    const size_t closing = token_.offset;
    KILN_RETURN_IF_ERROR(expect_punct("}"));
    if (end != nullptr) {
      *end = closing + 1;
    } else if (token_.kind != TokenKind::end) {
      return error("unexpected text after the graph");
    }
    graph.set_outputs(std::move(outputs));
    KILN_RETURN_IF_ERROR(verify(graph));
    return graph;
  }

 private:
  Status error(std::string_view message) const { return lexer_.error_at(token_, message); }

  void advance() { token_ = lexer_.next(); }

  bool is_punct(std::string_view p) const {
    return token_.kind == TokenKind::punct && token_.text == p;
  }
  bool is_keyword(std::string_view word) const {
    return token_.kind == TokenKind::identifier && token_.text == word;
  }

  std::string describe_token() const {
    switch (token_.kind) {
      case TokenKind::end: return "end of input";
      case TokenKind::value_name: return fmt::format("'%{}'", token_.text);
      case TokenKind::graph_name: return fmt::format("'@{}'", token_.text);
      case TokenKind::string: return "a string";
      default: return fmt::format("'{}'", token_.text);
    }
  }

  Status expect_punct(std::string_view p) {
    if (!is_punct(p)) return error(fmt::format("expected '{}', found {}", p, describe_token()));
    advance();
    return Status::ok();
  }
  Status expect_keyword(std::string_view word) {
    if (!is_keyword(word)) {
      return error(fmt::format("expected '{}', found {}", word, describe_token()));
    }
    advance();
    return Status::ok();
  }
  bool accept_punct(std::string_view p) {
    if (!is_punct(p)) return false;
    advance();
    return true;
  }

  Expected<int64_t> parse_int() {
    const Token start = token_;
    const bool negative = is_punct("-");
    if (negative) advance();
    if (token_.kind != TokenKind::integer) {
      return error(fmt::format("expected an integer, found {}", describe_token()));
    }
    KILN_ASSIGN_OR_RETURN(int64_t value, integer_value(start, negative));
    advance();
    return value;
  }

  // The value of the current integer token, negated if `negative`; errors are located at
  // `start`, where the number's text begins.
  Expected<int64_t> integer_value(const Token& start, bool negative) const {
    uint64_t magnitude = 0;
    const char* begin = token_.text.data();
    const char* end = begin + token_.text.size();
    auto [ptr, ec] = std::from_chars(begin, end, magnitude);
    const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
    if (ec != std::errc() || ptr != end || magnitude > limit) {
      return lexer_.error_at(
          start, fmt::format("integer {}{} is out of range", negative ? "-" : "", token_.text));
    }
    return negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
  }

  // The value of the current floating token, as integer_value.
  Expected<double> float_value(const Token& start, bool negative) const {
    double value = 0;
    const char* begin = token_.text.data();
    const char* end = begin + token_.text.size();
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec == std::errc::result_out_of_range) {
      // Overflow reads as infinity and underflow as zero, as strtod does (from_chars leaves
      // `value` unset).
      value = beyond_double_range_upward(token_.text) ? std::numeric_limits<double>::infinity()
                                                      : 0.0;
    } else if (ec != std::errc() || ptr != end) {
      return lexer_.error_at(start, fmt::format("malformed number '{}'", token_.text));
    }
    return negative ? -value : value;
  }

  // For a non-zero literal `digits [. digits] [e [+-] digits]` outside the range of double:
  // whether it is too large (rather than too small), that is whether the decimal exponent of
  // its leading non-zero digit is positive.
  static bool beyond_double_range_upward(std::string_view text) {
    const size_t e = text.find('e');
    int64_t exponent = 0;
    if (e != std::string_view::npos) {
      const bool negative = text[e + 1] == '-';
      // Saturates far beyond any digit count the text could offset it by.
      for (char c : text.substr(e + 1)) {
        if (is_digit(c) && exponent < (int64_t{1} << 40)) exponent = exponent * 10 + (c - '0');
      }
      if (negative) exponent = -exponent;
    }
    const std::string_view mantissa = text.substr(0, e);
    const std::string_view whole = mantissa.substr(0, mantissa.find('.'));
    const size_t lead = whole.find_first_not_of('0');
    if (lead != std::string_view::npos) {
      return static_cast<int64_t>(whole.size() - lead - 1) + exponent > 0;
    }
    const std::string_view fraction =
        whole.size() < mantissa.size() ? mantissa.substr(whole.size() + 1) : std::string_view();
    const size_t first = fraction.find_first_not_of('0');
    if (first == std::string_view::npos) return false;
    return exponent - static_cast<int64_t>(first + 1) > 0;
  }

  // A number as an attribute or tensor element; integers keep their exact int64 value.
  struct Number {
    double value = 0;
    std::optional<int64_t> integer;
  };

  Expected<Number> parse_number(bool allow_bool) {
    const Token start = token_;
    const bool negative = is_punct("-");
    if (negative) advance();
    Number number;
    if (token_.kind == TokenKind::integer) {
      KILN_ASSIGN_OR_RETURN(int64_t v, integer_value(start, negative));
      number = {static_cast<double>(v), v};
    } else if (token_.kind == TokenKind::floating) {
      KILN_ASSIGN_OR_RETURN(number.value, float_value(start, negative));
    } else if (is_keyword("inf")) {
      number.value = negative ? -std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::infinity();
    } else if (is_keyword("nan") && !negative) {
      number.value = std::numeric_limits<double>::quiet_NaN();
    } else if (allow_bool && !negative && (is_keyword("true") || is_keyword("false"))) {
      number.value = is_keyword("true") ? 1.0 : 0.0;
    } else {
      return error(fmt::format("expected a number, found {}", describe_token()));
    }
    advance();
    return number;
  }

  Expected<TensorType> parse_type() {
    if (token_.kind != TokenKind::identifier) {
      return error(fmt::format("expected a type like f32[2,3], found {}", describe_token()));
    }
    std::optional<DType> dtype = parse_dtype(token_.text);
    if (!dtype) return error(fmt::format("unknown dtype '{}'", token_.text));
    const Token type_token = token_;
    advance();
    KILN_RETURN_IF_ERROR(expect_punct("["));
    std::vector<int64_t> dims;
    if (!is_punct("]")) {
      do {
        KILN_ASSIGN_OR_RETURN(int64_t dim, parse_int());
        dims.push_back(dim);
      } while (accept_punct(","));
    }
    KILN_RETURN_IF_ERROR(expect_punct("]"));
    Expected<Shape> shape = Shape::make(std::move(dims));
    if (!shape) return lexer_.error_at(type_token, shape.status().message());
    return TensorType{*dtype, std::move(*shape)};
  }

  Status parse_params(Graph& graph) {
    KILN_RETURN_IF_ERROR(expect_punct("("));
    if (accept_punct(")")) return Status::ok();
    do {
      KILN_ASSIGN_OR_RETURN(std::string name, parse_value_definition(graph));
      KILN_RETURN_IF_ERROR(expect_punct(":"));
      KILN_ASSIGN_OR_RETURN(TensorType type, parse_type());
      graph.add_input(std::move(type), name);
    } while (accept_punct(","));
    return expect_punct(")");
  }

  // A %name being defined: must be new.
  Expected<std::string> parse_value_definition(const Graph& graph) {
    if (token_.kind != TokenKind::value_name) {
      return error(fmt::format("expected a value name like %x, found {}", describe_token()));
    }
    if (graph.find_value(token_.text) != nullptr) {
      return error(fmt::format("value %{} is defined twice", token_.text));
    }
    std::string name = token_.text;
    advance();
    return name;
  }

  Expected<Value*> parse_value_use(const Graph& graph) {
    if (token_.kind != TokenKind::value_name) {
      return error(fmt::format("expected a value name like %x, found {}", describe_token()));
    }
    Value* value = graph.find_value(token_.text);
    if (value == nullptr) return error(fmt::format("undefined value %{}", token_.text));
    advance();
    return value;
  }

  Expected<AttrValue> parse_attr_value() {
    if (token_.kind == TokenKind::string) {
      std::string text = token_.text;
      advance();
      return AttrValue(std::move(text));
    }
    if (is_keyword("true") || is_keyword("false")) {
      const bool value = is_keyword("true");
      advance();
      return AttrValue(value);
    }
    if (is_keyword("tensor")) return parse_tensor_literal();
    if (token_.kind == TokenKind::identifier && parse_dtype(token_.text)) {
      const DType dtype = *parse_dtype(token_.text);
      advance();
      return AttrValue(dtype);
    }
    if (accept_punct("[")) {
      std::vector<Number> items;
      if (!is_punct("]")) {
        do {
          KILN_ASSIGN_OR_RETURN(Number item, parse_number(/*allow_bool=*/false));
          items.push_back(item);
        } while (accept_punct(","));
      }
      KILN_RETURN_IF_ERROR(expect_punct("]"));
      // A list of integers is an int list; any float makes it a float list.
      if (std::ranges::all_of(items, [](const Number& n) { return n.integer.has_value(); })) {
        std::vector<int64_t> ints;
        for (const Number& n : items) ints.push_back(*n.integer);
        return AttrValue(std::move(ints));
      }
      std::vector<double> floats;
      for (const Number& n : items) floats.push_back(n.value);
      return AttrValue(std::move(floats));
    }
    KILN_ASSIGN_OR_RETURN(Number number, parse_number(/*allow_bool=*/false));
    if (number.integer) return AttrValue(*number.integer);
    return AttrValue(number.value);
  }

  Expected<AttrValue> parse_tensor_literal() {
    const Token start = token_;
    advance();
    KILN_RETURN_IF_ERROR(expect_punct("<"));
    KILN_ASSIGN_OR_RETURN(TensorType type, parse_type());
    KILN_RETURN_IF_ERROR(expect_punct(">"));
    KILN_RETURN_IF_ERROR(expect_punct("["));
    const int64_t expected = type.shape.num_elements();
    std::vector<double> values;
    if (!is_punct("]")) {
      do {
        if (static_cast<int64_t>(values.size()) == expected) {
          return error(fmt::format("tensor literal has more than the {} elements of {}", expected,
                                   type.to_string()));
        }
        KILN_ASSIGN_OR_RETURN(Number element, parse_number(/*allow_bool=*/true));
        values.push_back(element.value);
      } while (accept_punct(","));
    }
    KILN_RETURN_IF_ERROR(expect_punct("]"));
    if (static_cast<int64_t>(values.size()) != expected) {
      return lexer_.error_at(start, fmt::format("tensor literal has {} elements, {} needs {}",
                                                values.size(), type.to_string(), expected));
    }
    return AttrValue(Array(type.dtype, type.shape, std::move(values)));
  }

  // Attributes of a node of `def`. Names and kinds are checked against its schema here, so that
  // errors point at the attribute; add_node checks the rest (required attributes, values).
  Expected<Attrs> parse_attrs(const OpDef& def) {
    Attrs attrs;
    if (!accept_punct("{")) return attrs;
    do {
      if (token_.kind != TokenKind::identifier) {
        return error(fmt::format("expected an attribute name, found {}", describe_token()));
      }
      std::string name = token_.text;
      if (attrs.contains(name)) return error(fmt::format("attribute '{}' given twice", name));
      const AttrSpec* spec = def.find_attr(name);
      if (spec == nullptr) {
        return error(fmt::format("op '{}' has no attribute '{}'", def.name, name));
      }
      advance();
      KILN_RETURN_IF_ERROR(expect_punct("="));
      const Token value_token = token_;
      KILN_ASSIGN_OR_RETURN(AttrValue value, parse_attr_value());
      Expected<AttrValue> coerced = coerce_attr(value, spec->kind);
      if (!coerced) {
        return lexer_.error_at(value_token, fmt::format("attribute '{}' of op '{}': {}", name,
                                                        def.name, coerced.status().message()));
      }
      attrs.set(name, std::move(*coerced));
    } while (accept_punct(","));
    KILN_RETURN_IF_ERROR(expect_punct("}"));
    return attrs;
  }

  Status parse_statement(Graph& graph) {
    const Token start = token_;
    std::vector<std::string> names;
    do {
      const Token name_token = token_;
      KILN_ASSIGN_OR_RETURN(std::string name, parse_value_definition(graph));
      if (std::ranges::find(names, name) != names.end()) {
        return lexer_.error_at(name_token, fmt::format("value %{} is defined twice", name));
      }
      names.push_back(std::move(name));
    } while (accept_punct(","));
    KILN_RETURN_IF_ERROR(expect_punct("="));
    if (token_.kind != TokenKind::identifier) {
      return error(fmt::format("expected an op name, found {}", describe_token()));
    }
    const Token op_token = token_;
    const OpDef* def = find_op(token_.text);
    if (def == nullptr) return error(fmt::format("unknown op '{}'", token_.text));
    advance();
    KILN_RETURN_IF_ERROR(expect_punct("("));
    std::vector<Value*> inputs;
    if (!is_punct(")")) {
      do {
        KILN_ASSIGN_OR_RETURN(Value * input, parse_value_use(graph));
        inputs.push_back(input);
      } while (accept_punct(","));
    }
    KILN_RETURN_IF_ERROR(expect_punct(")"));
    KILN_ASSIGN_OR_RETURN(Attrs attrs, parse_attrs(*def));
    KILN_RETURN_IF_ERROR(expect_punct(":"));
    std::vector<std::pair<Token, TensorType>> annotated;
    do {
      const Token type_token = token_;
      KILN_ASSIGN_OR_RETURN(TensorType type, parse_type());
      annotated.emplace_back(type_token, std::move(type));
    } while (accept_punct(","));

    Expected<Node*> node = graph.add_node(def->op, std::move(inputs), attrs, names);
    if (!node) return lexer_.error_at(op_token, node.status().message());
    if ((*node)->num_outputs() != static_cast<int>(names.size())) {
      // The node exists in the graph now, but the whole parse fails, so it is never seen.
      return lexer_.error_at(start, fmt::format("op '{}' produces {} results, {} named",
                                                def->name, (*node)->num_outputs(), names.size()));
    }
    if (annotated.size() != names.size()) {
      return lexer_.error_at(annotated.front().first,
                             fmt::format("{} result types given for {} results", annotated.size(),
                                         names.size()));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      const TensorType& inferred = (*node)->output(static_cast<int>(i))->type();
      if (annotated[i].second != inferred) {
        return lexer_.error_at(annotated[i].first,
                               fmt::format("result %{} is annotated {} but op '{}' gives {}",
                                           names[i], annotated[i].second.to_string(), def->name,
                                           inferred.to_string()));
      }
    }
    return Status::ok();
  }

  Lexer lexer_;
  Token token_;
};

}  // namespace

Expected<Graph> parse_graph(std::string_view text, std::string_view filename) {
  Parser parser(text, filename);
  return parser.parse();
}

Expected<Graph> parse_graph_at(std::string_view text, size_t& offset, std::string_view filename) {
  Parser parser(text, filename, offset);
  return parser.parse(&offset);
}

}  // namespace kiln
