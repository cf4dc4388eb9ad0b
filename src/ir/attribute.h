// Attributes: the compile-time parameters of a node (axis, perm, epsilon, ...).
//
// An AttrValue is one of eight kinds. Each op declares an attribute schema (ir/op.h); a node's
// Attrs always hold every attribute of its schema, defaults filled in, in schema order, so
// passes read them without checking for presence. Ints and floats are distinct kinds; where a
// schema asks for a float an int literal is accepted and converted (see coerce_attr).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ir/array.h"
#include "ir/dtype.h"
#include "support/status.h"

namespace kiln {

enum class AttrKind { integer, floating, boolean, string, ints, floats, dtype, tensor };

std::string_view attr_kind_name(AttrKind kind);

class AttrValue {
 public:
  AttrValue(int v) : value_(int64_t{v}) {}          // NOLINT(google-explicit-constructor)
  AttrValue(int64_t v) : value_(v) {}               // NOLINT
  AttrValue(double v) : value_(v) {}                // NOLINT
  AttrValue(bool v) : value_(v) {}                  // NOLINT
  AttrValue(const char* v) : value_(std::string(v)) {}  // NOLINT
  AttrValue(std::string v) : value_(std::move(v)) {}    // NOLINT
  AttrValue(std::vector<int64_t> v) : value_(std::move(v)) {}  // NOLINT
  AttrValue(std::initializer_list<int64_t> v) : value_(std::vector<int64_t>(v)) {}  // NOLINT
  AttrValue(std::vector<double> v) : value_(std::move(v)) {}  // NOLINT
  AttrValue(DType v) : value_(v) {}                 // NOLINT
  AttrValue(Array v) : value_(std::make_shared<const Array>(std::move(v))) {}  // NOLINT

  AttrKind kind() const { return static_cast<AttrKind>(value_.index()); }

  int64_t as_int() const { return std::get<int64_t>(value_); }
  double as_float() const { return std::get<double>(value_); }
  bool as_bool() const { return std::get<bool>(value_); }
  const std::string& as_string() const { return std::get<std::string>(value_); }
  const std::vector<int64_t>& as_ints() const { return std::get<std::vector<int64_t>>(value_); }
  const std::vector<double>& as_floats() const { return std::get<std::vector<double>>(value_); }
  DType as_dtype() const { return std::get<DType>(value_); }
  const Array& as_tensor() const { return *std::get<std::shared_ptr<const Array>>(value_); }

  bool operator==(const AttrValue& other) const;

 private:
  // Order matches AttrKind.
  std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>,
               DType, std::shared_ptr<const Array>>
      value_;
};

// Converts `value` to `kind` where the conversion is lossless by intent (int -> float,
// ints -> floats, and an empty float list -> empty int list); error otherwise.
Expected<AttrValue> coerce_attr(const AttrValue& value, AttrKind kind);

// Name -> value pairs. Lookups are linear: nodes have a handful of attributes.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> entries);

  void set(std::string_view name, AttrValue value);
  const AttrValue* find(std::string_view name) const;
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  const AttrValue& get(std::string_view name) const;  // KILN_CHECKs presence

  int64_t get_int(std::string_view name) const { return get(name).as_int(); }
  double get_float(std::string_view name) const { return get(name).as_float(); }
  bool get_bool(std::string_view name) const { return get(name).as_bool(); }
  const std::string& get_string(std::string_view name) const { return get(name).as_string(); }
  const std::vector<int64_t>& get_ints(std::string_view name) const { return get(name).as_ints(); }
  const std::vector<double>& get_floats(std::string_view name) const {
    return get(name).as_floats();
  }
  DType get_dtype(std::string_view name) const { return get(name).as_dtype(); }
  const Array& get_tensor(std::string_view name) const { return get(name).as_tensor(); }

  const std::vector<std::pair<std::string, AttrValue>>& entries() const { return entries_; }
  bool operator==(const Attrs&) const = default;

 private:
  std::vector<std::pair<std::string, AttrValue>> entries_;
};

}  // namespace kiln
