// The interface between the ATen importer (aten_import.cc) and its op converters (aten_ops.cc).
// Internal to src/frontend.
//
// A converter reads its node's arguments by schema name through AtenNode and builds Kiln ops
// with the node's GraphBuilder. Each argument must be read or ignored by name: the importer
// rejects a node with an argument nobody read.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ir/builder.h"
#include "ir/graph.h"
#include "support/status.h"

namespace kiln::aten_import {

using Json = nlohmann::json;

// Kiln's values of every node converted so far, by node (or input) name; a node with several
// results has one entry per result (null where it produced none).
using ValueTable = std::map<std::string, std::vector<Value*>, std::less<>>;

// The graph's random stream: the seed input, made by the first random op, and where the next
// random op's counter starts, so that no two ops draw the same bits.
struct RandomStream {
  Value* seed = nullptr;
  int64_t next_offset = 0;
};

class AtenNode {
 public:
  AtenNode(GraphBuilder& builder, const ValueTable& values, RandomStream& random, const Json& node,
           std::vector<std::optional<TensorType>> outputs)
      : b(builder), values_(values), random_(random), node_(node), outputs_(std::move(outputs)) {}

  GraphBuilder& b;

  std::string_view target() const;
  // PyTorch's type of result i, as the graph's metadata gives it. Converters build results of
  // exactly this type (the importer checks).
  const TensorType& output_type(int i = 0) const;
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  bool wants_output(int i) const { return outputs_[static_cast<size_t>(i)].has_value(); }

  // Arguments by schema name. Each reader fails naming the argument when it is absent or of
  // another kind; `optional_*` readers accept null.
  Expected<Value*> tensor(std::string_view name);
  Expected<std::optional<Value*>> optional_tensor(std::string_view name);
  Expected<std::vector<Value*>> tensors(std::string_view name);
  // A list whose entries may be null (ATen's Tensor?[], as index's indices): nullopt for those.
  Expected<std::vector<std::optional<Value*>>> optional_tensors(std::string_view name);
  Expected<int64_t> integer(std::string_view name);
  Expected<std::optional<int64_t>> optional_integer(std::string_view name);
  // An int or a float (ATen's Scalar).
  Expected<double> number(std::string_view name);
  Expected<std::optional<double>> optional_number(std::string_view name);
  // True when the Scalar argument was written as a float (it then promotes an integer tensor).
  Expected<bool> is_float_number(std::string_view name);
  Expected<bool> boolean(std::string_view name);
  Expected<std::optional<bool>> optional_boolean(std::string_view name);
  Expected<std::vector<int64_t>> integers(std::string_view name);
  // A list of ints where null reads as the empty list (the reductions' dim=None).
  Expected<std::vector<int64_t>> integers_or_empty(std::string_view name);
  Expected<std::vector<bool>> booleans(std::string_view name);
  Expected<std::optional<std::string>> optional_string(std::string_view name);
  // Marks arguments that do not change the values computed (memory formats, layouts, devices,
  // pin_memory): read and dropped.
  void ignore(std::initializer_list<std::string_view> names);
  // The graph's seed input (kAtenRngSeedInput, aten_import.h), and the counter where this
  // node's `elements` random draws start.
  Expected<Value*> rng_seed();
  int64_t take_rng_offsets(int64_t elements);

  // The error for an argument value the converter does not support.
  Status unsupported(std::string_view name, std::string_view why) const;

  // The arguments no reader touched.
  std::vector<std::string> unread_arguments() const;

 private:
  Expected<const Json*> argument(std::string_view name);
  Expected<Value*> resolve(const Json& ref, std::string_view name);
  Expected<std::vector<int64_t>> read_integers(std::string_view name, bool null_is_empty);

  const ValueTable& values_;
  RandomStream& random_;
  const Json& node_;
  std::vector<std::optional<TensorType>> outputs_;
  std::set<std::string, std::less<>> read_;
};

// Builds the results of one node: one entry per result (nullptr for one it does not produce).
using Converter = std::function<Expected<std::vector<Value*>>(AtenNode&)>;

// Every converter, by ATen overload name ("aten.mm.default"). Defined in aten_ops.cc.
const std::map<std::string, Converter, std::less<>>& converters();

}  // namespace kiln::aten_import
