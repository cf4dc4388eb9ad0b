// The table of ONNX op converters, merged from the family files.
#include <algorithm>
#include <unordered_map>

#include "frontend/onnx_converter.h"
#include "support/check.h"

namespace kiln::onnx_import {
namespace {

const std::unordered_map<std::string_view, Converter>& converter_table() {
  static const auto* table = [] {
    auto* map = new std::unordered_map<std::string_view, Converter>();
    for (auto family : {&elementwise_converters, &layout_converters, &nn_converters}) {
      for (const ConverterEntry& entry : family()) {
        KILN_CHECK(map->emplace(entry.op_type, entry.convert).second,
                   "ONNX op type {} has two converters", entry.op_type);
      }
    }
    return map;
  }();
  return *table;
}

}  // namespace

Converter find_converter(std::string_view op_type) {
  auto it = converter_table().find(op_type);
  return it == converter_table().end() ? nullptr : it->second;
}

}  // namespace kiln::onnx_import

namespace kiln {

std::vector<std::string> supported_onnx_op_types() {
  std::vector<std::string> names;
  for (const auto& [name, converter] : onnx_import::converter_table()) names.emplace_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kiln
