#include "fusion/context.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <queue>
#include <set>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "ir/printer.h"
#include "loop/ir_visitor.h"
#include "loop/lower_group.h"
#include "loop/scratch.h"

namespace kiln::fusion {
namespace {

// Bytes of every local buffer a kernel allocates.
class LocalBytes : public loop::IRVisitor {
 public:
  int64_t bytes = 0;

 protected:
  void visit_allocate(const loop::Allocate& node) override {
    bytes += node.buffer.flat_size() * dtype_size_bytes(node.buffer.dtype());
    loop::IRVisitor::visit_allocate(node);
  }
};

class DisjointSets {
 public:
  explicit DisjointSets(int size) : parent_(static_cast<size_t>(size)) {
    std::iota(parent_.begin(), parent_.end(), 0);
  }
  int find(int x) {
    while (parent_[static_cast<size_t>(x)] != x) {
      parent_[static_cast<size_t>(x)] = parent_[static_cast<size_t>(parent_[static_cast<size_t>(x)])];
      x = parent_[static_cast<size_t>(x)];
    }
    return x;
  }
  void join(int a, int b) { parent_[static_cast<size_t>(find(a))] = find(b); }

 private:
  std::vector<int> parent_;
};

// What a group's structure decides, remembered across partitions in this process by the
// group's structural key (PartitionContext::structure_key): groups of one structure (a
// transformer's layers; the same graph partitioned again, as the substitution search does for
// every candidate) are lowered and estimated once. An estimate's views are kept as (position
// in the group, output index), since its value pointers belong to one graph. Cleared when its
// keys reach kMaxRememberedKeyBytes, so a long process stays bounded (bounded by bytes, not
// by groups, since a key is a line of text per node).
struct RememberedEstimate {
  cost::KernelEstimate estimate;  // views empty
  std::vector<std::pair<size_t, int>> views;
};

constexpr size_t kMaxRememberedKeyBytes = size_t{64} << 20;

template <typename T>
class StructuralMemo {
 public:
  std::optional<T> find(const std::string& key) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }
  void remember(std::string key, T value) {
    std::lock_guard lock(mutex_);
    if (key_bytes_ + key.size() > kMaxRememberedKeyBytes) {
      entries_.clear();
      key_bytes_ = 0;
    }
    key_bytes_ += key.size();
    entries_.emplace(std::move(key), std::move(value));
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, T> entries_;
  size_t key_bytes_ = 0;
};

}  // namespace

PartitionContext::PartitionContext(const Graph& graph, const FusionOptions& options)
    : graph_(graph), options_(options), reach_(graph) {
  neighbours_.resize(static_cast<size_t>(reach_.size()));
  for (int i = 0; i < reach_.size(); ++i) {
    const Node& consumer = *reach_.node(i);
    if (consumer.op() == Op::constant) continue;
    computed_.push_back(i);
    std::set<int> producers;
    for (const Value* input : consumer.inputs()) {
      const Node* producer = input->producer();
      if (producer != nullptr && producer->op() != Op::constant) {
        producers.insert(reach_.index(producer));
      }
    }
    for (int p : producers) {
      edges_.push_back({p, i, classify_edge(*reach_.node(p), consumer, options.disabled_rules)});
    }
  }
  find_components();
  // With fusion off no group is formed, so no edge needs cutting.
  if (options.mode != FusionMode::off && !options.disabled_rules.contains("cut-tied-edges")) {
    while (cut_tied_edges()) find_components();
  }
  for (const FusibleEdge& edge : edges_) {
    if (!edge.verdict.fusible) continue;
    neighbours_[static_cast<size_t>(edge.producer)].push_back(edge.consumer);
    neighbours_[static_cast<size_t>(edge.consumer)].push_back(edge.producer);
  }
}

void PartitionContext::find_components() {
  DisjointSets sets(reach_.size());
  for (const FusibleEdge& edge : edges_) {
    if (edge.verdict.fusible) sets.join(edge.producer, edge.consumer);
  }
  component_.resize(static_cast<size_t>(reach_.size()));
  for (int i = 0; i < reach_.size(); ++i) component_[static_cast<size_t>(i)] = sets.find(i);
}

bool PartitionContext::cut_tied_edges() {
  std::map<int, std::vector<int>> members;  // component -> its nodes
  for (const FusibleEdge& edge : edges_) {
    if (!edge.verdict.fusible) continue;
    for (int node : {edge.producer, edge.consumer}) members[component(node)].push_back(node);
  }
  std::map<int, Reachability::Bits> inside;
  for (const auto& [root, nodes] : members) inside.emplace(root, reach_.make_set(nodes));
  bool cut = false;
  for (FusibleEdge& edge : edges_) {
    if (!edge.verdict.fusible) continue;
    const std::optional<int> through =
        reach_.path_outside(edge.producer, edge.consumer, inside.at(component(edge.producer)));
    if (!through) continue;
    const Node& node = *reach_.node(*through);
    edge.verdict = {false, "",
                    fmt::format("tied through %{} = {}: a path from the producer reaches the "
                                "consumer through it, and it can never share their kernel, so no "
                                "convex group holds both (cut before partitioning)",
                                node.output(0)->name(), node.op_name())};
    ++tied_edges_cut_;
    cut = true;
  }
  return cut;
}

std::vector<Node*> PartitionContext::nodes_of(const NodeSet& group) const {
  std::vector<Node*> nodes;
  for (int i : group) nodes.push_back(const_cast<Node*>(reach_.node(i)));
  return nodes;
}

std::string PartitionContext::structure_key(const NodeSet& group) {
  if (key_prefix_.empty()) {
    const cost::DeviceProfile& profile = *options_.profile;
    key_prefix_ = fmt::format("{} {} {} {} {} {} {} {} {}\n", profile.matmul_flops,
                              profile.vector_flops, profile.memory_bandwidth, profile.l2_bytes,
                              profile.llc_bytes, profile.kernel_overhead, profile.cores,
                              options_.max_local_bytes, options_.library_table);
    node_texts_.resize(static_cast<size_t>(reach_.size()));
  }
  std::string key = key_prefix_;
  std::map<const Node*, size_t> local;
  for (int index : group) local.emplace(reach_.node(index), local.size());
  std::map<const Value*, size_t> external;
  for (int index : group) {
    const Node& node = *reach_.node(index);
    std::string& text = node_texts_[static_cast<size_t>(index)];
    if (text.empty()) {
      text = node.op_name();
      for (const auto& [name, value] : node.attrs().entries()) {
        text += fmt::format(" {}={}", name, print_attr_value(value));
      }
    }
    key += text;
    key += " (";
    for (const Value* input : node.inputs()) {
      const Node* producer = input->producer();
      if (auto found = local.find(producer); producer != nullptr && found != local.end()) {
        key += fmt::format(" n{}.{}", found->second, input->output_index());
      } else if (producer != nullptr && producer->op() == Op::constant &&
                 input->shape().num_elements() == 1) {
        // Lowering writes a one-element constant into the kernel as a literal.
        key += fmt::format(" k{}", print_attr_value(producer->attrs().get("value")));
      } else {
        const bool constant = producer != nullptr && producer->op() == Op::constant;
        auto [it, inserted] = external.emplace(input, external.size());
        key += fmt::format(" {}{}:{}", constant ? "c" : "x", it->second, input->type().to_string());
      }
    }
    key += " ) ->";
    for (const Value* output : node.outputs()) {
      const bool leaves = std::any_of(output->users().begin(), output->users().end(),
                                      [&](const Node* user) { return !local.contains(user); });
      key += fmt::format(" {}{}{}", output->type().to_string(), leaves ? "!" : "",
                         graph_.is_output(output) ? "@" : "");
    }
    key += "\n";
  }
  return key;
}

const cost::KernelEstimate& PartitionContext::estimate(const NodeSet& group) {
  auto it = estimates_.find(group);
  if (it != estimates_.end()) return it->second;
  static StructuralMemo<RememberedEstimate> remembered_estimates;
  const std::vector<Node*> nodes = nodes_of(group);
  const std::string key = structure_key(group);
  if (std::optional<RememberedEstimate> remembered = remembered_estimates.find(key)) {
    cost::KernelEstimate estimate = std::move(remembered->estimate);
    for (const auto& [position, output] : remembered->views) {
      estimate.views.push_back(nodes[position]->output(output));
    }
    return estimates_.emplace(group, std::move(estimate)).first->second;
  }
  cost::KernelEstimate estimate = cost::estimate_kernel(graph_, nodes, *options_.profile);
  RememberedEstimate remembered{estimate, {}};
  remembered.estimate.views.clear();
  for (const Value* view : estimate.views) {
    const auto position = std::ranges::find(nodes, view->producer()) - nodes.begin();
    remembered.views.emplace_back(static_cast<size_t>(position), view->output_index());
  }
  remembered_estimates.remember(key, std::move(remembered));
  return estimates_.emplace(group, std::move(estimate)).first->second;
}

// Lowers the group once for its questions (local buffers, library calls). A single node is
// always accepted; only those that are not inlinable can have local buffers (a reduction, a
// convolution's columns), so only those are lowered.
const PartitionContext::LoopVerdict& PartitionContext::loop_verdict(const NodeSet& group) {
  auto it = loop_verdicts_.find(group);
  if (it != loop_verdicts_.end()) return it->second;
  static StructuralMemo<LoopVerdict> remembered_verdicts;
  const std::string key = structure_key(group);
  if (std::optional<LoopVerdict> remembered = remembered_verdicts.find(key)) {
    return loop_verdicts_.emplace(group, std::move(*remembered)).first->second;
  }
  LoopVerdict verdict;
  const std::vector<Node*> nodes = nodes_of(group);
  const bool single = group.size() == 1;
  if (!single || !is_inlinable(nodes.front()->def().fusion_kind)) {
    Expected<loop::LoweredGroup> lowered = loop::lower_group(graph_, nodes);
    if (!lowered) {
      if (!single) verdict.rejection = fmt::format("lowering failed: {}", lowered.status().message());
    } else {
      LocalBytes locals;
      locals.visit(lowered->kernel.body);
      if (!single && locals.bytes > options_.max_local_bytes) {
        verdict.rejection =
            fmt::format("the kernel needs {} bytes of local buffers, over the limit of {}",
                        locals.bytes, options_.max_local_bytes);
      }
      if (!single && !verdict.rejection && options_.library_calls) {
        if (const Status runs = options_.library_calls(lowered->kernel); !runs) {
          verdict.rejection = runs.message();
        }
      }
      verdict.scratch_bytes = loop::scratch_bytes(lowered->kernel);
    }
  }
  remembered_verdicts.remember(key, verdict);
  return loop_verdicts_.emplace(group, std::move(verdict)).first->second;
}

const std::optional<std::string>& PartitionContext::loop_rejection(const NodeSet& group) {
  return loop_verdict(group).rejection;
}

int64_t PartitionContext::scratch_bytes(const NodeSet& group) {
  return loop_verdict(group).scratch_bytes;
}

std::optional<std::vector<int>> find_group_cycle(const PartitionContext& context,
                                                 const std::vector<NodeSet>& groups) {
  std::vector<int> group_of(static_cast<size_t>(context.reach().size()), -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int node : groups[g]) group_of[static_cast<size_t>(node)] = static_cast<int>(g);
  }
  std::vector<std::set<int>> successors(groups.size());
  for (const FusibleEdge& edge : context.edges()) {
    const int from = group_of[static_cast<size_t>(edge.producer)];
    const int to = group_of[static_cast<size_t>(edge.consumer)];
    if (from >= 0 && to >= 0 && from != to) successors[static_cast<size_t>(from)].insert(to);
  }
  // Depth-first search with colours: reaching a group on the current path closes a cycle.
  enum class Colour { white, grey, black };
  std::vector<Colour> colour(groups.size(), Colour::white);
  std::vector<int> path;
  std::vector<int> cycle;
  const auto visit = [&](auto&& self, int g) -> bool {
    colour[static_cast<size_t>(g)] = Colour::grey;
    path.push_back(g);
    for (int next : successors[static_cast<size_t>(g)]) {
      if (colour[static_cast<size_t>(next)] == Colour::grey) {
        cycle.assign(std::find(path.begin(), path.end(), next), path.end());
        return true;
      }
      if (colour[static_cast<size_t>(next)] == Colour::white && self(self, next)) return true;
    }
    path.pop_back();
    colour[static_cast<size_t>(g)] = Colour::black;
    return false;
  };
  for (size_t g = 0; g < groups.size(); ++g) {
    if (colour[g] == Colour::white && visit(visit, static_cast<int>(g))) return cycle;
  }
  return std::nullopt;
}

std::vector<NodeSet> dependency_order(const PartitionContext& context,
                                      std::vector<NodeSet> groups) {
  std::vector<int> group_of(static_cast<size_t>(context.reach().size()), -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int node : groups[g]) group_of[static_cast<size_t>(node)] = static_cast<int>(g);
  }
  std::vector<std::set<int>> successors(groups.size());
  std::vector<int> waiting(groups.size(), 0);
  for (const FusibleEdge& edge : context.edges()) {
    const int from = group_of[static_cast<size_t>(edge.producer)];
    const int to = group_of[static_cast<size_t>(edge.consumer)];
    if (from != to && successors[static_cast<size_t>(from)].insert(to).second) {
      ++waiting[static_cast<size_t>(to)];
    }
  }
  using Ready = std::pair<int, int>;  // (first node, group)
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (waiting[g] == 0) ready.emplace(groups[g].front(), static_cast<int>(g));
  }
  std::vector<NodeSet> ordered;
  while (!ready.empty()) {
    const int g = ready.top().second;
    ready.pop();
    ordered.push_back(groups[static_cast<size_t>(g)]);
    for (int next : successors[static_cast<size_t>(g)]) {
      if (--waiting[static_cast<size_t>(next)] == 0) {
        ready.emplace(groups[static_cast<size_t>(next)].front(), next);
      }
    }
  }
  return ordered;
}

}  // namespace kiln::fusion
