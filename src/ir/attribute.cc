#include "ir/attribute.h"

#include "support/check.h"

namespace kiln {

std::string_view attr_kind_name(AttrKind kind) {
  switch (kind) {
    case AttrKind::integer: return "int";
    case AttrKind::floating: return "float";
    case AttrKind::boolean: return "bool";
    case AttrKind::string: return "string";
    case AttrKind::ints: return "ints";
    case AttrKind::floats: return "floats";
    case AttrKind::dtype: return "dtype";
    case AttrKind::tensor: return "tensor";
  }
  KILN_UNREACHABLE("bad attribute kind");
}

bool AttrValue::operator==(const AttrValue& other) const {
  if (kind() != other.kind()) return false;
  if (kind() == AttrKind::tensor) return as_tensor() == other.as_tensor();
  return value_ == other.value_;
}

Expected<AttrValue> coerce_attr(const AttrValue& value, AttrKind kind) {
  if (value.kind() == kind) return value;
  if (kind == AttrKind::floating && value.kind() == AttrKind::integer) {
    return AttrValue(static_cast<double>(value.as_int()));
  }
  if (kind == AttrKind::floats && value.kind() == AttrKind::ints) {
    return AttrValue(std::vector<double>(value.as_ints().begin(), value.as_ints().end()));
  }
  if (kind == AttrKind::ints && value.kind() == AttrKind::floats && value.as_floats().empty()) {
    return AttrValue(std::vector<int64_t>{});
  }
  return Status::errorf("expected {}, got {}", attr_kind_name(kind), attr_kind_name(value.kind()));
}

Attrs::Attrs(std::initializer_list<std::pair<std::string, AttrValue>> entries) {
  for (const auto& [name, value] : entries) set(name, value);
}

void Attrs::set(std::string_view name, AttrValue value) {
  for (auto& [existing, old_value] : entries_) {
    if (existing == name) {
      old_value = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::string(name), std::move(value));
}

const AttrValue* Attrs::find(std::string_view name) const {
  for (const auto& [existing, value] : entries_) {
    if (existing == name) return &value;
  }
  return nullptr;
}

const AttrValue& Attrs::get(std::string_view name) const {
  const AttrValue* value = find(name);
  KILN_CHECK(value != nullptr, "missing attribute '{}'", name);
  return *value;
}

}  // namespace kiln
