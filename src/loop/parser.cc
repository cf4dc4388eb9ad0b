#include "loop/parser.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "loop/printer.h"
#include "loop/verifier.h"

namespace kiln::loop {
namespace {

// --- Tokens -------------------------------------------------------------------------------

enum class TokenKind : uint8_t { end, name, integer, floating, punct, error };

struct Token {
  TokenKind kind = TokenKind::end;
  std::string_view text;  // into the source; empty for the end and for an error
  int line = 1;
  int column = 1;
  size_t offset = 0;  // where the token starts in the source
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c) || c == '.'; }

// Two-character operators before their one-character prefixes.
constexpr std::string_view kPuncts[] = {"==", "!=", "<=", ">=", "&&", "||", "+=", "(", ")",
                                        "{",  "}",  "[",  "]",  ",",  ":",  "=",  "+", "-",
                                        "*",  "/",  "%",  "<",  ">",  "!",  "^"};

class Lexer {
 public:
  explicit Lexer(std::string_view text) : text_(text) {}

  // Every token to the end of the text, or up to and including the first malformed one (an
  // error token; its message is error()).
  std::vector<Token> tokenize() {
    std::vector<Token> tokens;
    do {
      tokens.push_back(next());
    } while (tokens.back().kind != TokenKind::end && tokens.back().kind != TokenKind::error);
    return tokens;
  }

  const std::string& error() const { return error_; }

 private:
  Token next() {
    skip_space_and_comments();
    Token token{TokenKind::end, {}, line_, column_, pos_};
    if (pos_ >= text_.size()) return token;
    const char c = text_[pos_];
    if (is_digit(c)) return read_number(token);
    if (is_name_start(c)) return finish(token, TokenKind::name, end_of(is_name_char, pos_) - pos_);
    for (std::string_view punct : kPuncts) {
      if (text_.substr(pos_).starts_with(punct)) {
        return finish(token, TokenKind::punct, punct.size());
      }
    }
    return fail(token, c >= 0x20 && c < 0x7F ? fmt::format("unexpected character '{}'", c)
                                             : fmt::format("unexpected byte 0x{:02X}",
                                                           static_cast<unsigned char>(c)));
  }

  void skip_space_and_comments() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '\n') {
        ++line_;
        column_ = 1;
      } else if (c == '/' && text_.substr(pos_).starts_with("//")) {
        const size_t end = text_.find('\n', pos_);
        column_ += static_cast<int>((end == std::string_view::npos ? text_.size() : end) - pos_);
        pos_ = end == std::string_view::npos ? text_.size() : end;
        continue;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++column_;
      } else {
        return;
      }
      ++pos_;
    }
  }

  // digits ['.' digits] [('e' | 'E') ['+' | '-'] digits] ['f' after a point or an exponent]
  Token read_number(const Token& token) {
    size_t end = end_of(is_digit, pos_);
    bool floating = false;
    if (end < text_.size() && text_[end] == '.') {
      floating = true;
      end = end_of(is_digit, end + 1);
    }
    if (end < text_.size() && (text_[end] == 'e' || text_[end] == 'E')) {
      floating = true;
      size_t digits = end + 1;
      if (digits < text_.size() && (text_[digits] == '+' || text_[digits] == '-')) ++digits;
      end = end_of(is_digit, digits);
      if (end == digits) return fail(token, "malformed number: its exponent has no digits");
    }
    if (floating && end < text_.size() && text_[end] == 'f') ++end;
    if (end < text_.size() && is_name_char(text_[end])) return fail(token, "malformed number");
    return finish(token, floating ? TokenKind::floating : TokenKind::integer, end - pos_);
  }

  template <typename Pred>
  size_t end_of(Pred pred, size_t from) const {
    while (from < text_.size() && pred(text_[from])) ++from;
    return from;
  }

  Token finish(Token token, TokenKind kind, size_t length) {
    token.kind = kind;
    token.text = text_.substr(pos_, length);
    pos_ += length;
    column_ += static_cast<int>(length);
    return token;
  }

  Token fail(Token token, std::string message) {
    token.kind = TokenKind::error;
    error_ = std::move(message);
    return token;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
  int column_ = 1;
  std::string error_;
};

// --- Names of the IR's enumerations -------------------------------------------------------

// The enumerator of E whose name is `text`, trying every value below `count`.
template <typename E, typename NameOf>
std::optional<E> enum_named(std::string_view text, int count, NameOf name_of) {
  for (int i = 0; i < count; ++i) {
    if (name_of(static_cast<E>(i)) == text) return static_cast<E>(i);
  }
  return std::nullopt;
}

std::optional<ForKind> for_kind_named(std::string_view text) {
  return enum_named<ForKind>(text, static_cast<int>(ForKind::gpu_thread) + 1, for_kind_name);
}
std::optional<MemoryScope> scope_named(std::string_view text) {
  return enum_named<MemoryScope>(text, static_cast<int>(MemoryScope::gpu_shared) + 1,
                                 memory_scope_name);
}
std::optional<Intrinsic> intrinsic_named(std::string_view text) {
  return enum_named<Intrinsic>(text, static_cast<int>(Intrinsic::dropout_bits) + 1, intrinsic_name);
}
std::optional<ReduceOp> reduce_op_named(std::string_view text) {
  return enum_named<ReduceOp>(text, static_cast<int>(ReduceOp::max) + 1, reduce_op_name);
}

struct BinaryOperator {
  std::string_view symbol;
  BinaryOp op;
  int precedence;  // loosest 1
};

constexpr BinaryOperator kBinaryOperators[] = {
    {"||", BinaryOp::logical_or, 1}, {"&&", BinaryOp::logical_and, 2}, {"==", BinaryOp::eq, 3},
    {"!=", BinaryOp::ne, 3},         {"<", BinaryOp::lt, 3},           {"<=", BinaryOp::le, 3},
    {">", BinaryOp::gt, 3},          {">=", BinaryOp::ge, 3},          {"+", BinaryOp::add, 4},
    {"-", BinaryOp::sub, 4},         {"*", BinaryOp::mul, 5},          {"/", BinaryOp::div, 5},
    {"%", BinaryOp::mod, 5},
};

const BinaryOperator* binary_operator(const Token& token) {
  if (token.kind != TokenKind::punct) return nullptr;
  for (const BinaryOperator& op : kBinaryOperators) {
    if (op.symbol == token.text) return &op;
  }
  return nullptr;
}

// --- Values the text leaves out -----------------------------------------------------------

// `type(inner)` as written: the constant of `type` when inner is a constant and that constant
// prints exactly as the cast does (i32(3), f16(0.5), f32(-inf)), else the cast. Either reads
// back as the same text and computes the same value; the constant is what Kiln builds.
Expr cast_or_constant(DType type, const Expr& inner) {
  Expr as_cast = cast(type, inner);
  Expr constant;
  if (const IntImm* i = inner.as<IntImm>(); i != nullptr && is_integer(type)) {
    constant = make_int(i->value, type);
  } else if (const FloatImm* f = inner.as<FloatImm>(); f != nullptr && is_floating(type)) {
    constant = make_float(f->value, type);
  }
  return constant.defined() && print(constant) == print(as_cast) ? constant : as_cast;
}

// Whether a buffer's row-major strides and its flat size fit in int64 (so that building and
// sizing it cannot overflow).
bool fits_int64(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t row = 1, last = 0;
  for (size_t i = shape.size(); i-- > 0;) {
    const int64_t stride = strides.empty() ? row : strides[i];
    int64_t term = 0;
    if (__builtin_mul_overflow(row, shape[i], &row) ||
        __builtin_mul_overflow(std::max<int64_t>(shape[i] - 1, 0), stride, &term) ||
        __builtin_add_overflow(last, term, &last)) {
      return false;
    }
  }
  return true;
}

// One line of a block as read: a statement, or the head of a `let` (no statement) whose scope
// the block's assembly decides; and the names bound anywhere in it, [first, last) of the
// parser's binders in the order it read them (a let's own name first).
struct Item {
  Stmt stmt;
  std::string let_name;
  Expr let_value;
  size_t first_binder = 0, last_binder = 0;
};

Stmt sequence(std::vector<Stmt> stmts) {
  return stmts.size() == 1 ? std::move(stmts[0]) : block(std::move(stmts));
}

// For each name bound in a block, the indices of the items that bind it, ascending.
std::map<std::string, std::vector<size_t>, std::less<>> binding_items(
    const std::vector<Item>& items, const std::vector<std::string>& binders) {
  std::map<std::string, std::vector<size_t>, std::less<>> bound_at;
  for (size_t i = 0; i < items.size(); ++i) {
    for (size_t b = items[i].first_binder; b < items[i].last_binder; ++b) {
      bound_at[binders[b]].push_back(i);
    }
  }
  return bound_at;
}

// The statement of a block's items: each let scopes over the items after it up to the first
// that binds its name again, or the end of the let around it (loop/parser.h: let scopes).
Stmt assemble(const std::vector<Item>& items, const std::vector<std::string>& binders) {
  auto bound_at = binding_items(items, binders);
  struct OpenLet {
    std::string name;
    Expr value;
    size_t end;  // the first item outside its scope
    std::vector<Stmt> stmts;
  };
  std::vector<OpenLet> open = {{"", {}, items.size(), {}}};
  const auto close = [&open] {
    OpenLet let = std::move(open.back());
    open.pop_back();
    open.back().stmts.push_back(let_stmt(let.name, let.value, sequence(std::move(let.stmts))));
  };
  for (size_t i = 0; i < items.size(); ++i) {
    while (open.back().end == i) close();
    if (items[i].stmt.defined()) {
      open.back().stmts.push_back(items[i].stmt);
      continue;
    }
    const std::vector<size_t>& rebound = bound_at[items[i].let_name];
    const auto next = std::upper_bound(rebound.begin(), rebound.end(), i);
    const size_t end = std::min(next == rebound.end() ? items.size() : *next, open.back().end);
    open.push_back({items[i].let_name, items[i].let_value, end, {}});
  }
  while (open.size() > 1) close();
  return sequence(std::move(open[0].stmts));
}

// A buffer declaration as written, before it is made a parameter or an allocation.
struct Decl {
  const Token* at = nullptr;
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::optional<std::vector<int64_t>> strides;
  MemoryScope scope = MemoryScope::global;
};

// --- The parser ---------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::string_view text, std::string_view filename) : text_(text), filename_(filename) {
    Lexer lexer(text);
    tokens_ = lexer.tokenize();
    lexer_error_ = lexer.error();
  }

  Expected<std::vector<Kernel>> parse_file() {
    std::vector<Kernel> kernels;
    while (peek().kind != TokenKind::end) {
      if (!at("kernel")) return unexpected("a kernel");
      KILN_ASSIGN_OR_RETURN(Kernel kernel, parse_kernel());
      kernels.push_back(std::move(kernel));
    }
    return kernels;
  }

 private:
  // --- Tokens and errors ---

  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  bool at(std::string_view text, size_t ahead = 0) const {
    const Token& token = peek(ahead);
    return (token.kind == TokenKind::punct || token.kind == TokenKind::name) && token.text == text;
  }
  bool name_at(size_t ahead) const { return peek(ahead).kind == TokenKind::name; }
  const Token& take() {
    const Token& token = peek();
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }
  bool accept(std::string_view text) {
    if (!at(text)) return false;
    take();
    return true;
  }

  Status error_at(const Token& token, std::string_view message) const {
    return Status::errorf("{}:{}:{}: {}", filename_, token.line, token.column,
                          token.kind == TokenKind::error ? lexer_error_ : message);
  }
  // "expected X, found Y" at the next token.
  Status unexpected(std::string_view expected) const {
    const Token& token = peek();
    const std::string found = token.kind == TokenKind::end ? std::string("the end of the input")
                                                           : fmt::format("'{}'", token.text);
    return error_at(token, fmt::format("expected {}, found {}", expected, found));
  }
  Status expect(std::string_view text) {
    return accept(text) ? Status::ok() : unexpected(fmt::format("'{}'", text));
  }
  Expected<std::string> expect_name(std::string_view what) {
    if (!name_at(0)) return unexpected(what);
    return std::string(take().text);
  }
  Expected<int64_t> expect_int(std::string_view what) {
    if (peek().kind != TokenKind::integer) return unexpected(what);
    const Token& token = take();
    int64_t value = 0;
    const auto [end, ec] =
        std::from_chars(token.text.data(), token.text.data() + token.text.size(), value);
    if (ec != std::errc() || end != token.text.data() + token.text.size()) {
      return error_at(token, fmt::format("{} does not fit i64", token.text));
    }
    return value;
  }
  Expected<DType> expect_dtype() {
    const std::optional<DType> type = name_at(0) ? parse_dtype(peek().text) : std::nullopt;
    if (!type) return unexpected("a dtype (f32, f64, f16, bf16, i32, i64, bool)");
    take();
    return *type;
  }
  // `node` when it satisfies its own typing rules (loop/verifier.h: check_node), else the
  // rule's message at `token`.
  template <typename Node>
  Expected<Node> checked(const Token& token, Node node) const {
    const Status status = check_node(node);
    if (!status) return error_at(token, status.message());
    return node;
  }

  // Counts one level of nesting while alive.
  class Nesting {
   public:
    explicit Nesting(int& depth) : depth_(++depth) {}
    ~Nesting() { --depth_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;
    bool too_deep() const { return depth_ > kMaxLoopIRNesting; }

   private:
    int& depth_;
  };
  Status too_deep(const Token& token) const {
    return error_at(token, fmt::format("nested more than {} levels deep", kMaxLoopIRNesting));
  }

  // --- Scopes ---

  // `parse` run with `name` bound to `type` (a loop's, reduction's or let expression's).
  template <typename Parse>
  auto with_var(std::string name, DType type, Parse&& parse) {
    binders_.push_back(name);
    vars_.emplace_back(std::move(name), type);
    auto result = parse();
    vars_.pop_back();
    return result;
  }
  template <typename Parse>
  auto with_buffer(const Buffer& buffer, Parse&& parse) {
    buffers_.push_back(buffer);
    auto result = parse();
    buffers_.pop_back();
    return result;
  }
  const Buffer* find_buffer(std::string_view name) const {
    const auto it = std::find_if(buffers_.rbegin(), buffers_.rend(),
                                 [&](const Buffer& b) { return b.name() == name; });
    return it == buffers_.rend() ? nullptr : &*it;
  }
  Expected<Buffer> expect_buffer() {
    if (!name_at(0)) return unexpected("a buffer name");
    const Token& token = take();
    const Buffer* buffer = find_buffer(token.text);
    if (buffer == nullptr) {
      return error_at(token, fmt::format("'{}' is neither a parameter nor an enclosing allocation",
                                         token.text));
    }
    return *buffer;
  }

  // --- Kernels ---

  Expected<Kernel> parse_kernel() {
    const Token& start = take();  // 'kernel'
    Kernel kernel;
    if (name_at(0)) kernel.name = take().text;
    KILN_RETURN_IF_ERROR(expect("("));
    while (!at(")")) {
      if (!kernel.params.empty()) KILN_RETURN_IF_ERROR(expect(","));
      KILN_ASSIGN_OR_RETURN(Decl decl, parse_decl());
      KILN_ASSIGN_OR_RETURN(Buffer param, param_buffer(decl));
      kernel.params.push_back(std::move(param));
    }
    take();  // ')'
    buffers_ = kernel.params;
    KILN_ASSIGN_OR_RETURN(kernel.body, parse_body());
    buffers_.clear();
    if (Status verified = verify(kernel); !verified) return error_at(start, verified.message());
    return kernel;
  }

  Expected<Decl> parse_decl() {
    Decl decl;
    decl.at = &peek();
    KILN_ASSIGN_OR_RETURN(decl.name, expect_name("a buffer name"));
    KILN_RETURN_IF_ERROR(expect(":"));
    KILN_ASSIGN_OR_RETURN(decl.dtype, expect_dtype());
    KILN_ASSIGN_OR_RETURN(decl.shape, parse_int_list("an extent"));
    if (accept("strides")) {
      KILN_ASSIGN_OR_RETURN(decl.strides, parse_int_list("a stride"));
    }
    if (accept("in")) {
      const std::optional<MemoryScope> scope = name_at(0) ? scope_named(peek().text) : std::nullopt;
      if (!scope) return unexpected("a memory scope (global, local, registers, gpu_shared)");
      take();
      decl.scope = *scope;
    }
    return decl;
  }

  // '[' [int (',' int)*] ']'
  Expected<std::vector<int64_t>> parse_int_list(std::string_view what) {
    KILN_RETURN_IF_ERROR(expect("["));
    std::vector<int64_t> values;
    while (!at("]")) {
      if (!values.empty()) KILN_RETURN_IF_ERROR(expect(","));
      KILN_ASSIGN_OR_RETURN(int64_t value, expect_int(what));
      values.push_back(value);
    }
    take();  // ']'
    return values;
  }

  Expected<Buffer> param_buffer(const Decl& decl) const {
    if (decl.scope != MemoryScope::global) {
      return error_at(*decl.at, fmt::format("parameter '{}' is in scope {}; parameters are global",
                                            decl.name, memory_scope_name(decl.scope)));
    }
    const std::vector<int64_t> strides = decl.strides.value_or(std::vector<int64_t>{});
    if (decl.strides && strides.size() != decl.shape.size()) {
      return error_at(*decl.at, fmt::format("'{}' has {} extents but {} strides", decl.name,
                                            decl.shape.size(), strides.size()));
    }
    if (!fits_int64(decl.shape, strides)) {
      return error_at(*decl.at, fmt::format("buffer '{}' is too large", decl.name));
    }
    return Buffer::param(decl.name, decl.dtype, decl.shape, strides);
  }

  Expected<Buffer> local_buffer(const Decl& decl) const {
    if (decl.shape.size() != 1 || (decl.strides && *decl.strides != std::vector<int64_t>{1})) {
      return error_at(*decl.at, fmt::format("allocation '{}' is not flat: it takes one extent "
                                            "and no strides",
                                            decl.name));
    }
    if (!fits_int64(decl.shape, {})) {
      return error_at(*decl.at, fmt::format("buffer '{}' is too large", decl.name));
    }
    return Buffer::local(decl.name, decl.dtype, decl.shape[0], decl.scope);
  }

  // --- Statements ---

  // body := '{' stmt* '}'
  Expected<Stmt> parse_body() {
    KILN_RETURN_IF_ERROR(expect("{"));
    const Nesting nesting(depth_);
    if (nesting.too_deep()) return too_deep(peek());
    std::vector<Item> items;
    const size_t vars_outside = vars_.size();
    while (!at("}") && peek().kind != TokenKind::end) {
      const size_t first_binder = binders_.size();
      KILN_ASSIGN_OR_RETURN(Item item, parse_item());
      item.first_binder = first_binder;
      item.last_binder = binders_.size();
      items.push_back(std::move(item));
    }
    vars_.resize(vars_outside);  // the block's lets
    KILN_RETURN_IF_ERROR(expect("}"));
    return assemble(items, binders_);
  }

  Expected<Item> parse_item() {
    if (!(at("let") && name_at(1) && at("=", 2))) {
      KILN_ASSIGN_OR_RETURN(Stmt stmt, parse_stmt());
      return Item{std::move(stmt), {}, {}};
    }
    take();  // 'let'
    std::string name(take().text);
    take();  // '='
    binders_.push_back(name);
    KILN_ASSIGN_OR_RETURN(Expr value, parse_expr());
    vars_.emplace_back(name, value.type());  // until the end of the block
    return Item{{}, std::move(name), std::move(value)};
  }

  // Keywords open statements only where their syntax follows, so buffers may be named like
  // them: `if[0] = 1.0f` stores into a buffer named if.
  Expected<Stmt> parse_stmt() {
    const std::optional<ForKind> kind = name_at(0) ? for_kind_named(peek().text) : std::nullopt;
    if (kind && at("for", 1)) return parse_for(take(), *kind);
    if (at("for") && at("(", 1)) return parse_for(peek(), ForKind::serial);
    if (at("allocate") && name_at(1) && at(":", 2)) return parse_allocate();
    if (at("if") && at("(", 1)) return parse_if();
    if (at("gemm") && at("(", 1)) return parse_gemm();
    if (at("conv") && at("(", 1)) return parse_conv();
    if (name_at(0) && at("[", 1)) return parse_store();
    if (at("atomic") && name_at(1) && at("[", 2)) {
      take();
      return parse_store(/*atomic=*/true);
    }
    return unexpected("a statement");
  }

  // What loops and reductions begin with: '(' name ',' min ',' extent.
  struct Range {
    std::string name;
    Expr min, extent;
  };
  Expected<Range> parse_range(std::string_view what) {
    Range range;
    KILN_RETURN_IF_ERROR(expect("("));
    KILN_ASSIGN_OR_RETURN(range.name, expect_name(what));
    KILN_RETURN_IF_ERROR(expect(","));
    KILN_ASSIGN_OR_RETURN(range.min, parse_expr());
    KILN_RETURN_IF_ERROR(expect(","));
    KILN_ASSIGN_OR_RETURN(range.extent, parse_expr());
    return range;
  }

  // [kind] 'for' range ')' body; `start` is the statement's first token.
  Expected<Stmt> parse_for(const Token& start, ForKind kind) {
    take();  // 'for'
    KILN_ASSIGN_OR_RETURN(Range range, parse_range("a loop variable"));
    KILN_RETURN_IF_ERROR(expect(")"));
    auto [name, min, extent] = std::move(range);
    KILN_RETURN_IF_ERROR(checked(start, for_loop(name, min, extent, kind, no_op())).status());
    KILN_ASSIGN_OR_RETURN(Stmt body, with_var(name, DType::i64, [&] { return parse_body(); }));
    return for_loop(std::move(name), std::move(min), std::move(extent), kind, std::move(body));
  }

  Expected<Stmt> parse_allocate() {
    const Token& start = take();  // 'allocate'
    KILN_ASSIGN_OR_RETURN(Decl decl, parse_decl());
    KILN_ASSIGN_OR_RETURN(Buffer buffer, local_buffer(decl));
    KILN_RETURN_IF_ERROR(checked(start, allocate(buffer, no_op())).status());
    KILN_ASSIGN_OR_RETURN(Stmt body, with_buffer(buffer, [&] { return parse_body(); }));
    return allocate(std::move(buffer), std::move(body));
  }

  Expected<Stmt> parse_if() {
    const Token& start = take();  // 'if'
    KILN_RETURN_IF_ERROR(expect("("));
    KILN_ASSIGN_OR_RETURN(Expr condition, parse_expr());
    KILN_RETURN_IF_ERROR(expect(")"));
    KILN_RETURN_IF_ERROR(checked(start, if_then_else(condition, no_op())).status());
    KILN_ASSIGN_OR_RETURN(Stmt then_case, parse_body());
    Stmt else_case;
    if (accept("else")) {
      KILN_ASSIGN_OR_RETURN(else_case, parse_body());
    }
    return if_then_else(std::move(condition), std::move(then_case), std::move(else_case));
  }

  // 'gemm' '(' m ',' n ',' k ')' c ('=' | '+=') a '*' b ['packed' 'in' buffer]
  Expected<Stmt> parse_gemm() {
    const Token& start = take();  // 'gemm'
    GemmArgs args;
    KILN_RETURN_IF_ERROR(expect("("));
    KILN_ASSIGN_OR_RETURN(args.m, parse_expr());
    KILN_RETURN_IF_ERROR(expect(","));
    KILN_ASSIGN_OR_RETURN(args.n, parse_expr());
    KILN_RETURN_IF_ERROR(expect(","));
    KILN_ASSIGN_OR_RETURN(args.k, parse_expr());
    KILN_RETURN_IF_ERROR(expect(")"));
    bool transposed_c = false;
    KILN_ASSIGN_OR_RETURN(args.c, parse_region(transposed_c));
    if (transposed_c) return error_at(start, "a gemm's result is not transposed");
    args.accumulate = accept("+=");
    if (!args.accumulate) KILN_RETURN_IF_ERROR(expect("="));
    KILN_ASSIGN_OR_RETURN(args.a, parse_region(args.transpose_a));
    KILN_RETURN_IF_ERROR(expect("*"));
    KILN_ASSIGN_OR_RETURN(args.b, parse_region(args.transpose_b));
    // A next statement may store to a buffer named `packed`; it is not followed by `in`.
    if (at("packed") && at("in", 1)) {
      take();
      take();
      KILN_ASSIGN_OR_RETURN(args.packed_b, expect_buffer());
    }
    return checked(start, gemm(std::move(args)));
  }

  // 'conv' '(' 'images' int ',' 'channels' int 'to' int ',' 'groups' int ',' 'in' ints ','
  // 'out' ints ',' 'kernel' ints ',' 'strides' ints ',' 'pads' ints ',' 'dilations' ints ')'
  // y '[' offset ']' '=' x '[' offset ']' '*' w ['+' bias] ['relu'] ['packed' 'in' buffer]
  Expected<Stmt> parse_conv() {
    const Token& start = take();  // 'conv'
    ConvArgs args;
    ConvGeometry& g = args.geometry;
    KILN_RETURN_IF_ERROR(expect("("));
    KILN_RETURN_IF_ERROR(expect("images"));
    KILN_ASSIGN_OR_RETURN(g.images, expect_int("a number of images"));
    KILN_RETURN_IF_ERROR(expect(","));
    KILN_RETURN_IF_ERROR(expect("channels"));
    KILN_ASSIGN_OR_RETURN(g.channels, expect_int("a number of channels"));
    KILN_RETURN_IF_ERROR(expect("to"));
    KILN_ASSIGN_OR_RETURN(g.out_channels, expect_int("a number of channels"));
    KILN_RETURN_IF_ERROR(expect(","));
    KILN_RETURN_IF_ERROR(expect("groups"));
    KILN_ASSIGN_OR_RETURN(g.groups, expect_int("a number of groups"));
    const std::pair<std::string_view, std::vector<int64_t>*> lists[] = {
        {"in", &g.in_spatial},   {"out", &g.out_spatial}, {"kernel", &g.kernel},
        {"strides", &g.strides}, {"pads", &g.pads_begin}, {"dilations", &g.dilations}};
    for (const auto& [keyword, list] : lists) {
      KILN_RETURN_IF_ERROR(expect(","));
      KILN_RETURN_IF_ERROR(expect(keyword));
      KILN_ASSIGN_OR_RETURN(*list, parse_int_list("an extent"));
    }
    KILN_RETURN_IF_ERROR(expect(")"));
    const auto operand = [&](Buffer& buffer, Expr& offset) -> Status {
      KILN_ASSIGN_OR_RETURN(buffer, expect_buffer());
      KILN_RETURN_IF_ERROR(expect("["));
      KILN_ASSIGN_OR_RETURN(offset, parse_expr());
      return expect("]");
    };
    KILN_RETURN_IF_ERROR(operand(args.y, args.y_offset));
    KILN_RETURN_IF_ERROR(expect("="));
    KILN_RETURN_IF_ERROR(operand(args.x, args.x_offset));
    KILN_RETURN_IF_ERROR(expect("*"));
    KILN_ASSIGN_OR_RETURN(args.w, expect_buffer());
    if (accept("+")) {
      KILN_ASSIGN_OR_RETURN(args.bias, expect_buffer());
    }
    // A next statement may store to a buffer named `relu`, `winograd` or `packed`; it is
    // followed by '['.
    if (at("relu") && !at("[", 1)) {
      take();
      args.relu = true;
    }
    if (at("winograd") && !at("[", 1)) {
      take();
      args.winograd = true;
    }
    if (at("packed") && at("in", 1)) {
      take();
      take();
      KILN_ASSIGN_OR_RETURN(args.packed_w, expect_buffer());
    }
    return checked(start, conv(std::move(args)));
  }

  // name '[' offset ',' 'ld' int ']' ['^' 'T']
  Expected<MatrixRegion> parse_region(bool& transposed) {
    MatrixRegion region;
    KILN_ASSIGN_OR_RETURN(region.buffer, expect_buffer());
    KILN_RETURN_IF_ERROR(expect("["));
    KILN_ASSIGN_OR_RETURN(region.offset, parse_expr());
    KILN_RETURN_IF_ERROR(expect(","));
    KILN_RETURN_IF_ERROR(expect("ld"));
    KILN_ASSIGN_OR_RETURN(region.leading_dim, expect_int("a leading dimension"));
    KILN_RETURN_IF_ERROR(expect("]"));
    transposed = accept("^");
    if (transposed) KILN_RETURN_IF_ERROR(expect("T"));
    return region;
  }

  // [ 'atomic' ] buffer '[' index ']' '=' value, an atomic store's value being
  // buffer[index] + addend.
  Expected<Stmt> parse_store(bool atomic = false) {
    const Token& start = peek();
    KILN_ASSIGN_OR_RETURN(Buffer buffer, expect_buffer());
    KILN_RETURN_IF_ERROR(expect("["));
    KILN_ASSIGN_OR_RETURN(Expr index, parse_expr());
    KILN_RETURN_IF_ERROR(expect("]"));
    KILN_RETURN_IF_ERROR(expect("="));
    KILN_ASSIGN_OR_RETURN(Expr value, parse_expr());
    Stmt stored = store(std::move(buffer), std::move(index), std::move(value));
    if (!atomic) return checked(start, std::move(stored));
    const Store& plain = *stored.as<Store>();
    const Expr* addend = addend_to_own_element(plain);
    if (addend == nullptr) {
      return error_at(start, "an atomic store's value is its own element plus an addend");
    }
    return checked(start, atomic_add(plain.buffer, plain.index, *addend));
  }

  // --- Expressions ---

  Expected<Expr> parse_expr() { return parse_binary(1); }

  // Operands joined by operators of at least `min_precedence`, left to right.
  Expected<Expr> parse_binary(int min_precedence) {
    KILN_ASSIGN_OR_RETURN(Expr lhs, parse_unary());
    int chain = 0;  // the left operand's depth: a long chain is a deep tree
    for (const BinaryOperator* op = binary_operator(peek());
         op != nullptr && op->precedence >= min_precedence; op = binary_operator(peek())) {
      const Token& token = take();
      if (depth_ + ++chain > kMaxLoopIRNesting) return too_deep(token);
      KILN_ASSIGN_OR_RETURN(Expr rhs, parse_binary(op->precedence + 1));
      KILN_ASSIGN_OR_RETURN(lhs, checked(token, binary(op->op, std::move(lhs), std::move(rhs))));
    }
    return lhs;
  }

  Expected<Expr> parse_unary() {
    const Token& start = peek();
    const Nesting nesting(depth_);
    if (nesting.too_deep()) return too_deep(start);
    if (!accept("!")) return parse_primary();
    KILN_ASSIGN_OR_RETURN(Expr operand, parse_unary());
    return checked(start, !std::move(operand));
  }

  Expected<Expr> parse_primary() {
    const Token& token = peek();
    if (token.kind == TokenKind::integer || token.kind == TokenKind::floating) {
      take();
      return parse_number(token, token.text);
    }
    if (token.kind == TokenKind::name) return parse_name();
    if (at("-")) return parse_negative();
    if (at("(") && at("let", 1) && name_at(2) && at("=", 3)) return parse_let();
    if (!accept("(")) return unexpected("an expression");
    KILN_ASSIGN_OR_RETURN(Expr inner, parse_expr());
    KILN_RETURN_IF_ERROR(expect(")"));
    return inner;
  }

  // A constant's text: i64 digits, f64 with a point or exponent, f32 with an `f` after those.
  Expected<Expr> parse_number(const Token& token, std::string_view text) const {
    const char* end = text.data() + text.size();
    if (token.kind == TokenKind::integer) {
      int64_t value = 0;
      const auto [stop, ec] = std::from_chars(text.data(), end, value);
      if (ec == std::errc() && stop == end) return make_int(value);
      return error_at(token, fmt::format("{} does not fit i64", text));
    }
    if (text.back() == 'f') {
      float value = 0;
      const auto [stop, ec] = std::from_chars(text.data(), end - 1, value);
      if (ec == std::errc() && stop == end - 1) return make_float(value, DType::f32);
      return error_at(token, fmt::format("{} is out of the range of f32", text));
    }
    double value = 0;
    const auto [stop, ec] = std::from_chars(text.data(), end, value);
    if (ec == std::errc() && stop == end) return make_float(value, DType::f64);
    return error_at(token, fmt::format("{} is out of the range of f64", text));
  }

  // '-' directly before a number or inf: a negative constant (the IR has no unary minus).
  Expected<Expr> parse_negative() {
    const Token& minus = take();
    const Token& next = peek();
    const bool adjacent = next.offset == minus.offset + 1;
    if (adjacent && (next.kind == TokenKind::integer || next.kind == TokenKind::floating)) {
      take();
      return parse_number(next, text_.substr(minus.offset, next.text.size() + 1));
    }
    if (adjacent && at("inf")) {
      take();
      return make_float(-std::numeric_limits<double>::infinity(), DType::f64);
    }
    return error_at(minus,
                    "expected a number directly after '-' (there is no unary minus: "
                    "0 - x negates x)");
  }

  Expected<Expr> parse_name() {
    const Token& token = peek();
    if (token.text == "true" || token.text == "false") {
      take();
      return make_bool(token.text == "true");
    }
    if (token.text == "inf" || token.text == "nan") {
      take();
      return make_float(token.text == "inf" ? std::numeric_limits<double>::infinity()
                                            : std::numeric_limits<double>::quiet_NaN(),
                        DType::f64);
    }
    if (token.text == "vectorized" && name_at(1) && reduce_op_named(peek(1).text) && at("(", 2)) {
      take();
      const Token& name = take();
      return parse_reduce(name, *reduce_op_named(name.text), /*vectorized=*/true);
    }
    if (at("(", 1)) return parse_call();
    if (at("[", 1)) return parse_load();
    return parse_variable();
  }

  Expected<Expr> parse_variable() {
    const Token& token = take();
    const auto it = std::find_if(vars_.rbegin(), vars_.rend(),
                                 [&](const auto& bound) { return bound.first == token.text; });
    if (it != vars_.rend()) return var(it->first, it->second);
    if (find_buffer(token.text) != nullptr) {
      return error_at(
          token, fmt::format("'{}' is a buffer: load it as {}[index]", token.text, token.text));
    }
    return error_at(token, fmt::format("unknown variable '{}'", token.text));
  }

  Expected<Expr> parse_load() {
    const Token& start = peek();
    KILN_ASSIGN_OR_RETURN(Buffer buffer, expect_buffer());
    take();  // '['
    KILN_ASSIGN_OR_RETURN(Expr index, parse_expr());
    KILN_RETURN_IF_ERROR(expect("]"));
    return checked(start, load(std::move(buffer), std::move(index)));
  }

  // '(' 'let' name '=' expr 'in' expr ')'
  Expected<Expr> parse_let() {
    take();  // '('
    take();  // 'let'
    std::string name(take().text);
    take();  // '='
    KILN_ASSIGN_OR_RETURN(Expr value, parse_expr());
    KILN_RETURN_IF_ERROR(expect("in"));
    KILN_ASSIGN_OR_RETURN(Expr body, with_var(name, value.type(), [&] { return parse_expr(); }));
    KILN_RETURN_IF_ERROR(expect(")"));
    return let(std::move(name), std::move(value), std::move(body));
  }

  // name '(' ...: a cast, select, min, max, an intrinsic or a reduction.
  Expected<Expr> parse_call() {
    const Token& name = take();
    if (const std::optional<Intrinsic> intrinsic = intrinsic_named(name.text)) {
      KILN_ASSIGN_OR_RETURN(std::vector<Expr> args, parse_args());
      return checked(name, call(*intrinsic, std::move(args)));
    }
    if (const std::optional<ReduceOp> op = reduce_op_named(name.text)) {
      return parse_reduce(name, *op, /*vectorized=*/false);
    }
    const std::optional<DType> type = parse_dtype(name.text);
    const size_t arity = type ? 1 : name.text == "select" ? 3 : 2;
    if (!type && name.text != "select" && name.text != "min" && name.text != "max") {
      return error_at(name, fmt::format("unknown function '{}'", name.text));
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Expr> args, parse_args());
    if (args.size() != arity) {
      return error_at(
          name, fmt::format("{} takes {} argument(s), not {}", name.text, arity, args.size()));
    }
    if (type) return cast_or_constant(*type, args[0]);
    if (name.text == "select") return checked(name, select(args[0], args[1], args[2]));
    return checked(name,
                   binary(name.text == "min" ? BinaryOp::min : BinaryOp::max, args[0], args[1]));
  }

  // '(' expr (',' expr)* ')'
  Expected<std::vector<Expr>> parse_args() {
    KILN_RETURN_IF_ERROR(expect("("));
    std::vector<Expr> args;
    do {
      KILN_ASSIGN_OR_RETURN(Expr arg, parse_expr());
      args.push_back(std::move(arg));
    } while (accept(","));
    KILN_RETURN_IF_ERROR(expect(")"));
    return args;
  }

  // op range ',' body ')', `name` being the op's token.
  Expected<Expr> parse_reduce(const Token& name, ReduceOp op, bool vectorized) {
    KILN_ASSIGN_OR_RETURN(Range range, parse_range("a reduction variable"));
    KILN_RETURN_IF_ERROR(expect(","));
    KILN_ASSIGN_OR_RETURN(Expr body,
                          with_var(range.name, DType::i64, [&] { return parse_expr(); }));
    KILN_RETURN_IF_ERROR(expect(")"));
    return checked(name, reduce(op, std::move(range.name), std::move(range.min),
                                std::move(range.extent), std::move(body), vectorized));
  }

  std::string_view text_;
  std::string_view filename_;
  std::vector<Token> tokens_;
  std::string lexer_error_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::vector<std::pair<std::string, DType>> vars_;  // innermost last
  std::vector<Buffer> buffers_;                      // innermost last
  std::vector<std::string> binders_;  // every variable a binder named, in the order read
};

}  // namespace

Expected<std::vector<Kernel>> parse_kernels(std::string_view text, std::string_view filename) {
  return Parser(text, filename).parse_file();
}

Expected<Kernel> parse_kernel(std::string_view text, std::string_view filename) {
  KILN_ASSIGN_OR_RETURN(std::vector<Kernel> kernels, parse_kernels(text, filename));
  if (kernels.size() != 1) {
    return Status::errorf("{}: expected one kernel, found {}", filename, kernels.size());
  }
  return std::move(kernels[0]);
}

}  // namespace kiln::loop
