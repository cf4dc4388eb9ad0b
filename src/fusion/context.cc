#include "fusion/context.h"

#include <algorithm>
#include <queue>
#include <set>

#include <fmt/format.h>

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
      FusibleEdge edge{p, i, classify_edge(*reach_.node(p), consumer, options.disabled_rules)};
      if (edge.verdict.fusible) {
        neighbours_[static_cast<size_t>(p)].push_back(i);
        neighbours_[static_cast<size_t>(i)].push_back(p);
      }
      edges_.push_back(std::move(edge));
    }
  }
}

std::vector<Node*> PartitionContext::nodes_of(const NodeSet& group) const {
  std::vector<Node*> nodes;
  for (int i : group) nodes.push_back(const_cast<Node*>(reach_.node(i)));
  return nodes;
}

const cost::KernelEstimate& PartitionContext::estimate(const NodeSet& group) {
  auto it = estimates_.find(group);
  if (it == estimates_.end()) {
    const std::vector<Node*> nodes = nodes_of(group);
    it = estimates_.emplace(group, cost::estimate_kernel(graph_, nodes, *options_.profile)).first;
  }
  return it->second;
}

// Lowers the group once for both questions. A single node is always accepted; only those
// that are not inlinable can have local buffers (a reduction, a convolution's columns), so
// only those are lowered.
const PartitionContext::LoopVerdict& PartitionContext::loop_verdict(const NodeSet& group) {
  auto it = loop_verdicts_.find(group);
  if (it != loop_verdicts_.end()) return it->second;
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
      verdict.scratch_bytes = loop::scratch_bytes(lowered->kernel);
    }
  }
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
