#include "ir/op.h"

#include <unordered_map>

#include "ir/ops/op_family.h"
#include "support/check.h"

namespace kiln {

std::string_view fusion_kind_name(FusionKind kind) {
  switch (kind) {
    case FusionKind::elementwise: return "elementwise";
    case FusionKind::broadcast: return "broadcast";
    case FusionKind::injective: return "injective";
    case FusionKind::reduction: return "reduction";
    case FusionKind::contraction: return "contraction";
    case FusionKind::opaque: return "opaque";
  }
  KILN_UNREACHABLE("bad fusion kind");
}

bool is_inlinable(FusionKind kind) {
  return kind == FusionKind::elementwise || kind == FusionKind::broadcast ||
         kind == FusionKind::injective;
}

bool reads_at_own_index(FusionKind kind) {
  return kind == FusionKind::elementwise || kind == FusionKind::broadcast;
}

const AttrSpec* OpDef::find_attr(std::string_view attr_name) const {
  for (const AttrSpec& spec : attrs) {
    if (spec.name == attr_name) return &spec;
  }
  return nullptr;
}

namespace {

struct Registry {
  std::vector<OpDef> defs;
  std::unordered_map<std::string_view, const OpDef*> by_name;

  Registry() : defs(static_cast<size_t>(kNumOps)) {
    const char* names[] = {
#define KILN_OP(id, text) text,
#include "ir/ops.def"
#undef KILN_OP
    };
    for (int i = 0; i < kNumOps; ++i) {
      defs[static_cast<size_t>(i)].op = static_cast<Op>(i);
      defs[static_cast<size_t>(i)].name = names[i];
    }
    ops::OpTable table(defs);
    ops::register_unary_ops(table);
    ops::register_binary_ops(table);
    ops::register_reduction_ops(table);
    ops::register_layout_ops(table);
    ops::register_contraction_ops(table);
    ops::register_pooling_ops(table);
    ops::register_composite_ops(table);
    ops::register_collective_ops(table);
    for (const OpDef& def : defs) {
      KILN_CHECK(by_name.emplace(def.name, &def).second, "duplicate op name {}", def.name);
    }
  }
};

const Registry& registry() {
  static const Registry instance;
  return instance;
}

}  // namespace

const OpDef& op_def(Op op) {
  const auto index = static_cast<size_t>(op);
  KILN_CHECK(index < static_cast<size_t>(kNumOps), "bad op {}", index);
  return registry().defs[index];
}

const OpDef* find_op(std::string_view name) {
  const auto& by_name = registry().by_name;
  auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : it->second;
}

std::span<const OpDef> all_op_defs() { return registry().defs; }

Expected<Attrs> canonicalize_attrs(const OpDef& def, const Attrs& given) {
  for (const auto& [name, value] : given.entries()) {
    if (def.find_attr(name) == nullptr) {
      return Status::errorf("op '{}' has no attribute '{}'", def.name, name);
    }
  }
  Attrs canonical;
  for (const AttrSpec& spec : def.attrs) {
    const AttrValue* value = given.find(spec.name);
    if (value == nullptr) {
      if (!spec.default_value) {
        return Status::errorf("op '{}' requires attribute '{}' ({})", def.name, spec.name,
                              attr_kind_name(spec.kind));
      }
      canonical.set(spec.name, *spec.default_value);
      continue;
    }
    Expected<AttrValue> coerced = coerce_attr(*value, spec.kind);
    if (!coerced) {
      return coerced.status().with_context(
          fmt::format("attribute '{}' of op '{}'", spec.name, def.name));
    }
    canonical.set(spec.name, std::move(*coerced));
  }
  return canonical;
}

Expected<std::vector<TensorType>> infer_types(const OpDef& def, std::span<const TensorType> inputs,
                                              const Attrs& attrs) {
  const int count = static_cast<int>(inputs.size());
  if (count < def.min_inputs || (def.max_inputs != kVariadic && count > def.max_inputs)) {
    const std::string expected =
        def.max_inputs == kVariadic ? fmt::format("at least {}", def.min_inputs)
        : def.min_inputs == def.max_inputs
            ? fmt::format("{}", def.min_inputs)
            : fmt::format("{} to {}", def.min_inputs, def.max_inputs);
    return Status::errorf("op '{}' takes {} inputs, got {}", def.name, expected, count);
  }
  Expected<std::vector<TensorType>> types = def.infer(inputs, attrs);
  if (!types) return types.status().with_context(fmt::format("op '{}'", def.name));
  return types;
}

}  // namespace kiln
