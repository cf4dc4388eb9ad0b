#include "cost/estimate.h"

#include <algorithm>
#include <map>
#include <set>

#include "comm/link_profile.h"

namespace kiln::cost {
namespace {

int64_t elements(const Value& value) { return value.shape().num_elements(); }

int64_t bytes_of(const Value& value) { return elements(value) * dtype_size_bytes(value.dtype()); }

// The time a collective's bytes take between the ranks; 0 for other ops.
double link_seconds_of(const Node& node) {
  if (!node.def().collective) return 0;
  const comm::LinkProfile link = comm::shared_memory_link_profile();
  const int ranks = comm::world_size_from_environment();
  const int64_t bytes = bytes_of(*node.output());
  return node.op() == Op::broadcast ? comm::broadcast_seconds(link, bytes, ranks)
                                    : comm::all_reduce_seconds(link, bytes, ranks);
}

class KernelEstimator {
 public:
  KernelEstimator(const Graph& graph, std::span<Node* const> nodes, const DeviceProfile& profile)
      : graph_(graph), profile_(profile) {
    for (const Node* node : nodes) {
      if (node->op() != Op::constant) members_.insert(node);
    }
    // Producers before consumers, found among the members alone: a scan of the graph's node
    // list would cost a partitioner that prices thousands of groups of a large graph more
    // than the estimates themselves.
    std::set<const Node*> visited;
    const auto visit = [&](auto&& self, const Node* node) -> void {
      if (!visited.insert(node).second) return;
      for (const Value* input : node->inputs()) {
        if (computed(*input)) self(self, input->producer());
      }
      order_.push_back(node);
    };
    for (const Node* node : nodes) {
      if (members_.contains(node)) visit(visit, node);
    }
  }

  KernelEstimate run() {
    for (const Node* node : order_) {
      for (const Value* value : node->outputs()) {
        if (is_view(*value)) {
          views_.push_back(value);
        } else if (is_stored(*value)) {
          stored_.push_back(value);
        }
      }
    }
    KernelEstimate estimate;
    estimate.views = views_;
    if (stored_.empty()) {
      // No kernel runs. The nanosecond only breaks ties: merging a view into a neighbour's
      // group then gains, so partitioners that merge while the estimate falls still keep a
      // reshape with the ops around it.
      estimate.is_kernel = false;
      estimate.seconds = kViewGroupSeconds;
      return estimate;
    }
    count_evaluations();
    count_flops(estimate);
    count_bytes(estimate);
    estimate.compute_seconds = estimate.matmul_flops / profile_.matmul_flops +
                               (estimate.flops - estimate.matmul_flops) / profile_.vector_flops;
    estimate.memory_seconds = static_cast<double>(estimate.bytes) / profile_.memory_bandwidth;
    estimate.link_seconds = link_seconds();
    estimate.seconds = profile_.kernel_overhead +
                       std::max(estimate.compute_seconds, estimate.memory_seconds) +
                       estimate.link_seconds;
    return estimate;
  }

 private:
  double link_seconds() const {
    double seconds = 0;
    for (const Node* node : order_) seconds += link_seconds_of(*node);
    return seconds;
  }

  bool computed(const Value& value) const {
    return value.producer() != nullptr && members_.contains(value.producer());
  }

  bool used_outside(const Value& value) const {
    if (graph_.is_output(&value)) return true;
    return std::any_of(value.users().begin(), value.users().end(),
                       [&](const Node* user) { return !members_.contains(user); });
  }

  // What lower_group stores, in its main rule: group outputs, values of ops that cannot be
  // inlined and are read in the group, and operands of contractions. Its finer choices are
  // not mirrored: batch_norm_train's y inlined after its stored statistics, and a libm-calling
  // value stored when a consumer reads it at several places.
  bool is_stored(const Value& value) const {
    if (used_outside(value)) return true;
    bool used_inside = false, feeds_contraction = false;
    for (const Node* user : value.users()) {
      if (!members_.contains(user)) continue;
      used_inside = true;
      feeds_contraction = feeds_contraction || user->def().fusion_kind == FusionKind::contraction;
    }
    return (used_inside && !is_inlinable(value.producer()->def().fusion_kind)) || feeds_contraction;
  }

  // lower_group's view rule: a reshape read outside, not as a graph output, whose input is a
  // group input, a stored group output or another view, and that no contraction of the group
  // reads.
  bool is_view(const Value& value) const {
    if (value.producer()->op() != Op::reshape || !used_outside(value)) return false;
    if (graph_.is_output(&value)) return false;
    for (const Node* user : value.users()) {
      if (members_.contains(user) && user->def().fusion_kind == FusionKind::contraction) return false;
    }
    const Value& source = *value.producer()->input(0);
    return !computed(source) || std::ranges::find(views_, &source) != views_.end() || (stored(source) && used_outside(source));
  }

  bool stored(const Value& value) const {
    return std::find(stored_.begin(), stored_.end(), &value) != stored_.end();
  }

  // How many times each computed value's elements are evaluated: once per element when
  // stored; when inlined, once per read by its consumers (reverse graph order, so consumers
  // are counted first). A reduction reads each input element once per output element's share.
  void count_evaluations() {
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      for (const Value* value : (*it)->outputs()) {
        if (stored(*value)) {
          evaluations_[value] = static_cast<double>(elements(*value));
          continue;
        }
        double reads = 0;
        for (const Node* user : distinct_member_users(*value)) {
          for (const Value* output : user->outputs()) {
            reads += evaluations_[output] * reads_per_element(*user, *output, *value);
          }
        }
        evaluations_[value] = reads;
      }
    }
  }

  std::vector<const Node*> distinct_member_users(const Value& value) const {
    std::set<const Node*> users;
    for (const Node* user : value.users()) {
      if (members_.contains(user)) users.insert(user);
    }
    return {users.begin(), users.end()};
  }

  static double reads_per_element(const Node& user, const Value& output, const Value& input) {
    if (is_inlinable(user.def().fusion_kind)) return 1;
    if (elements(output) == 0) return 0;
    return std::max(1.0, static_cast<double>(elements(input)) / static_cast<double>(elements(output)));
  }

  void count_flops(KernelEstimate& estimate) const {
    for (const Node* node : order_) {
      const std::vector<TensorType> inputs = node->input_types();
      const std::vector<TensorType> outputs = node->output_types();
      const double flops = node->def().cost(inputs, outputs, node->attrs()).flops;
      double produced = 0, evaluated = 0;
      for (const Value* output : node->outputs()) {
        produced += static_cast<double>(elements(*output));
        evaluated += evaluations_.at(output);
      }
      if (produced == 0) continue;
      const double per_element = flops / produced;
      estimate.flops += per_element * evaluated;
      estimate.recomputed_flops += per_element * std::max(0.0, evaluated - produced);
      if (node->def().fusion_kind == FusionKind::contraction) {
        estimate.matmul_flops += per_element * evaluated;
      }
    }
  }

  // The values a stored value's computation loads: kernel inputs and stored group values,
  // reached through inlined producers.
  void collect_reads(const Node& node, std::set<const Value*>& reads) const {
    for (const Value* input : node.inputs()) {
      if (!computed(*input) || stored(*input)) {
        reads.insert(input);
      } else {
        collect_reads(*input->producer(), reads);
      }
    }
  }

  void count_bytes(KernelEstimate& estimate) const {
    std::map<const Value*, int> readers;
    for (const Value* value : stored_) {
      std::set<const Value*> reads;
      collect_reads(*value->producer(), reads);
      for (const Value* read : reads) ++readers[read];
    }
    const int64_t cache_resident = profile_.llc_bytes / 2;
    for (const auto& [value, count] : readers) {
      if (computed(*value)) continue;  // a stored group value, counted below
      estimate.bytes += bytes_of(*value) * (bytes_of(*value) > cache_resident ? count : 1);
    }
    for (const Value* value : stored_) {
      if (used_outside(*value)) {
        estimate.bytes += bytes_of(*value);
      } else if (bytes_of(*value) > cache_resident) {
        auto it = readers.find(value);
        estimate.bytes += bytes_of(*value) * (1 + (it == readers.end() ? 0 : it->second));
      }
    }
  }

  const Graph& graph_;
  const DeviceProfile& profile_;
  std::set<const Node*> members_;
  std::vector<const Node*> order_;
  std::vector<const Value*> stored_;
  std::vector<const Value*> views_;
  std::map<const Value*, double> evaluations_;
};

}  // namespace

KernelEstimate estimate_kernel(const Graph& graph, std::span<Node* const> nodes,
                               const DeviceProfile& profile) {
  return KernelEstimator(graph, nodes, profile).run();
}

}  // namespace kiln::cost
