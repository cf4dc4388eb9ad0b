#include "fusion/partition.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <queue>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusion/context.h"

namespace kiln::fusion {
namespace {

std::vector<NodeSet> singletons(const PartitionContext& context) {
  std::vector<NodeSet> groups;
  for (int node : context.computed()) groups.push_back({node});
  return groups;
}

// Groups whose loop-level lowering is rejected are split back into single nodes (the greedy
// partitioner has no program to solve again).
std::vector<NodeSet> split_rejected(PartitionContext& context, std::vector<NodeSet> groups,
                                    std::vector<Decision>& decisions) {
  std::vector<NodeSet> result;
  for (NodeSet& group : groups) {
    const std::optional<std::string>& reason = context.loop_rejection(group);
    if (!reason) {
      result.push_back(std::move(group));
      continue;
    }
    decisions.push_back({Decision::Kind::rejected, nullptr, nullptr, "",
                         fmt::format("group of {} nodes starting at '{}' rejected by the loop "
                                     "level ({}); its nodes run alone",
                                     group.size(), context.reach().node(group.front())->op_name(),
                                     *reason)});
    for (int node : group) result.push_back({node});
  }
  return result;
}

std::string micros(double seconds) { return fmt::format("{:.2f} us", seconds * 1e6); }

// Why a fusible edge between two different groups was not fused.
std::string reason_apart(PartitionContext& context, const NodeSet& a, const NodeSet& b,
                         FusionMode mode) {
  if (mode == FusionMode::off) return "fusion is off";
  NodeSet merged;
  std::merge(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(merged));
  if (static_cast<int>(merged.size()) > context.options().max_group_nodes) {
    return fmt::format("the merged group would have {} nodes, over the limit of {}",
                       merged.size(), context.options().max_group_nodes);
  }
  if (!context.is_convex(merged)) {
    return "fusing would make a group non-convex: a path leaves it and comes back";
  }
  const double together = context.estimate(merged).seconds;
  const double apart = context.estimate(a).seconds + context.estimate(b).seconds;
  if (together >= apart) {
    return fmt::format("the cost model prefers two kernels ({} fused, {} apart)",
                       micros(together), micros(apart));
  }
  if (mode == FusionMode::greedy) {
    return "merging the two groups would close a cycle between groups";
  }
  return fmt::format("the two groups are cheaper fused ({} vs {}), but a cheaper partition of "
                     "the whole component keeps them apart",
                     micros(together), micros(apart));
}

std::vector<Decision> edge_decisions(PartitionContext& context, const std::vector<NodeSet>& groups,
                                     FusionMode mode) {
  std::vector<int> group_of(static_cast<size_t>(context.reach().size()), -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int node : groups[g]) group_of[static_cast<size_t>(node)] = static_cast<int>(g);
  }
  std::vector<Decision> decisions;
  for (const FusibleEdge& edge : context.edges()) {
    const Node* producer = context.reach().node(edge.producer);
    const Node* consumer = context.reach().node(edge.consumer);
    const int a = group_of[static_cast<size_t>(edge.producer)];
    const int b = group_of[static_cast<size_t>(edge.consumer)];
    if (a == b && edge.verdict.fusible) {
      decisions.push_back({Decision::Kind::fused, producer, consumer, edge.verdict.rule,
                           edge.verdict.reason});
    } else if (a == b) {
      decisions.push_back({Decision::Kind::fused, producer, consumer, "through-other-edges",
                           "in one kernel through other edges; on its own: " +
                               edge.verdict.reason});
    } else if (!edge.verdict.fusible) {
      decisions.push_back({Decision::Kind::cut, producer, consumer, "", edge.verdict.reason});
    } else {
      decisions.push_back({Decision::Kind::cut, producer, consumer, "",
                           reason_apart(context, groups[static_cast<size_t>(a)],
                                        groups[static_cast<size_t>(b)], mode)});
    }
  }
  return decisions;
}

std::string node_label(const Node& node) {
  return fmt::format("%{} = {}", node.output(0)->name(), node.op_name());
}

// The dtypes `nodes` compute ("f32, bf16"): under mixed precision, which kernels run in the
// low dtype.
std::string computed_dtypes(const std::vector<Node*>& nodes) {
  std::set<DType> dtypes;
  for (const Node* node : nodes) {
    for (const Value* output : node->outputs()) dtypes.insert(output->dtype());
  }
  std::vector<std::string_view> names;
  for (DType dtype : dtypes) names.push_back(dtype_name(dtype));
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string format_bytes(double bytes) {
  if (bytes >= 1 << 30) return fmt::format("{:.2f} GiB", bytes / (1 << 30));
  if (bytes >= 1 << 20) return fmt::format("{:.2f} MiB", bytes / (1 << 20));
  if (bytes >= 1 << 10) return fmt::format("{:.1f} KiB", bytes / (1 << 10));
  return fmt::format("{} B", bytes);
}

}  // namespace

std::string_view fusion_mode_name(FusionMode mode) {
  switch (mode) {
    case FusionMode::off: return "off";
    case FusionMode::greedy: return "greedy";
    case FusionMode::ilp: return "ilp";
  }
  return "?";
}

Expected<FusionMode> parse_fusion_mode(std::string_view name) {
  for (FusionMode mode : {FusionMode::off, FusionMode::greedy, FusionMode::ilp}) {
    if (name == fusion_mode_name(mode)) return mode;
  }
  return Status::errorf("unknown fusion mode '{}': use off, greedy or ilp", name);
}

int Partition::num_kernels() const {
  return static_cast<int>(std::ranges::count_if(groups, [](const Group& group) {
    return group.estimate.is_kernel && !group.nodes.front()->def().collective;
  }));
}

double Partition::estimated_seconds() const {
  double total = 0;
  for (const Group& group : groups) total += group.estimate.seconds;
  return total;
}

int64_t Partition::estimated_bytes() const {
  int64_t total = 0;
  for (const Group& group : groups) total += group.estimate.bytes;
  return total;
}

std::vector<std::vector<Node*>> Partition::node_groups() const {
  std::vector<std::vector<Node*>> result;
  for (const Group& group : groups) result.push_back(group.nodes);
  return result;
}

Expected<Partition> partition_graph(const Graph& graph, const FusionOptions& options) {
  for (const std::string& rule : options.disabled_rules) {
    const auto rules = fusion_rules();
    if (std::none_of(rules.begin(), rules.end(),
                     [&](const FusionRule& known) { return known.name == rule; })) {
      return Status::errorf("unknown fusion rule '{}'", rule);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  FusionOptions resolved = options;
  KILN_ASSIGN_OR_RETURN(resolved.profile, cost::given_or_host_profile(options.profile));
  PartitionContext context(graph, resolved);
  Partition partition;
  partition.mode = options.mode;
  partition.stats.tied_edges_cut = context.tied_edges_cut();
  partition.profile = *resolved.profile;
  std::vector<Decision> feedback;
  std::vector<NodeSet> groups;
  switch (resolved.mode) {
    case FusionMode::off:
      groups = singletons(context);
      break;
    case FusionMode::greedy:
      groups = split_rejected(context, greedy_partition(context), feedback);
      break;
    case FusionMode::ilp: {
      const std::vector<NodeSet> greedy = split_rejected(context, greedy_partition(context), feedback);
      KILN_ASSIGN_OR_RETURN(groups, ilp_partition(context, greedy, feedback, partition.stats));
      break;
    }
  }
  if (resolved.mode != FusionMode::off && !resolved.disabled_rules.contains("horizontal")) {
    groups = split_rejected(context, horizontal_fusion(context, groups, feedback), feedback);
  }
  groups = resolved.mode == FusionMode::off ? dependency_order(context, std::move(groups))
                                            : bound_memory(context, std::move(groups), feedback);
  partition.decisions = edge_decisions(context, groups, options.mode);
  partition.decisions.insert(partition.decisions.end(), feedback.begin(), feedback.end());
  for (const NodeSet& group : groups) {
    partition.groups.push_back({context.nodes_of(group), context.estimate(group)});
  }
  partition.stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  KILN_RETURN_IF_ERROR(check_partition(graph, partition));
  return partition;
}

Status check_partition(const Graph& graph, const Partition& partition) {
  const Reachability reach(graph);
  std::map<const Node*, size_t> group_of;
  for (size_t g = 0; g < partition.groups.size(); ++g) {
    std::vector<int> members;
    for (const Node* node : partition.groups[g].nodes) {
      if (node->op() == Op::constant) {
        return Status::errorf("group {} holds the constant %{}", g, node->output(0)->name());
      }
      if (!group_of.emplace(node, g).second) {
        return Status::errorf("node %{} is in two groups", node->output(0)->name());
      }
      members.push_back(reach.index(node));
    }
    std::sort(members.begin(), members.end());
    if (!reach.is_convex(members)) return Status::errorf("group {} is not convex", g);
  }
  for (const Node* node : graph.nodes()) {
    if (node->op() == Op::constant) continue;
    auto it = group_of.find(node);
    if (it == group_of.end()) {
      return Status::errorf("node %{} is in no group", node->output(0)->name());
    }
    for (const Value* input : node->inputs()) {
      const Node* producer = input->producer();
      if (producer == nullptr || producer->op() == Op::constant) continue;
      if (group_of.at(producer) > it->second) {
        return Status::errorf("group {} reads %{} from the later group {}", it->second,
                              input->name(), group_of.at(producer));
      }
    }
  }
  return Status::ok();
}

std::string explain_partition(const Graph& graph, const Partition& partition) {
  // A context only to price nodes alone: with fusion off it cuts no tied edges.
  FusionOptions options;
  options.mode = FusionMode::off;
  options.profile = partition.profile;
  PartitionContext context(graph, options);
  double alone_seconds = 0;
  int64_t alone_bytes = 0;
  for (int node : context.computed()) {
    alone_seconds += context.estimate({node}).seconds;
    alone_bytes += context.estimate({node}).bytes;
  }
  std::string text = fmt::format(
      "fusion {}: {} nodes in {} kernels; estimated {} and {} moved (each node alone: {} and "
      "{})\n",
      fusion_mode_name(partition.mode), context.computed().size(), partition.num_kernels(),
      micros(partition.estimated_seconds()), format_bytes(static_cast<double>(partition.estimated_bytes())),
      micros(alone_seconds), format_bytes(static_cast<double>(alone_bytes)));
  const PartitionStats& stats = partition.stats;
  text += fmt::format("partitioned in {:.3f} s", stats.seconds);
  if (stats.tied_edges_cut > 0) {
    text += fmt::format(" ({} tied edges cut first)", stats.tied_edges_cut);
  }
  if (partition.mode == FusionMode::ilp) {
    text += fmt::format(": {} components ({} solved before), {} candidate groups, {} ILP solves",
                        stats.components, stats.components_cached, stats.candidates,
                        stats.ilp_rounds);
    if (stats.components_timed_out > 0) {
      text += fmt::format(", {} stopped at the time limit", stats.components_timed_out);
    }
  }
  text += "\n";
  std::map<std::string, int> fused_by_rule;
  for (const Decision& decision : partition.decisions) {
    if (decision.kind == Decision::Kind::fused) ++fused_by_rule[decision.rule];
  }
  if (!fused_by_rule.empty()) {
    std::vector<std::string> parts;
    for (const auto& [rule, count] : fused_by_rule) parts.push_back(fmt::format("{} {}", rule, count));
    text += fmt::format("fused edges by rule: {}\n", fmt::join(parts, ", "));
  }
  text += "\ngroups (estimated time, bytes moved, bytes saved against its nodes alone):\n";
  int kernel = 0;
  for (const Group& group : partition.groups) {
    if (!group.estimate.is_kernel) {
      std::vector<std::string> views;
      for (const Node* node : group.nodes) views.push_back(node_label(*node));
      text += fmt::format("  no kernel: {} (views of buffers in memory)\n", fmt::join(views, ", "));
      continue;
    }
    int64_t alone = 0;
    for (const Node* node : group.nodes) alone += context.estimate({context.reach().index(node)}).bytes;
    text += fmt::format("  kernel {}: {} node{}, {}, {}, saves {}, in {}\n", kernel++,
                        group.nodes.size(), group.nodes.size() == 1 ? "" : "s",
                        micros(group.estimate.seconds),
                        format_bytes(static_cast<double>(group.estimate.bytes)),
                        format_bytes(static_cast<double>(alone - group.estimate.bytes)),
                        computed_dtypes(group.nodes));
    for (const Node* node : group.nodes) text += fmt::format("    {}\n", node_label(*node));
  }
  text += "\ncut edges:\n";
  for (const Decision& decision : partition.decisions) {
    if (decision.kind != Decision::Kind::cut) continue;
    text += fmt::format("  {} -> {}: {}\n", node_label(*decision.producer),
                        node_label(*decision.consumer), decision.reason);
  }
  std::string horizontal, feedback;
  for (const Decision& decision : partition.decisions) {
    if (decision.kind == Decision::Kind::horizontal) horizontal += fmt::format("  {}\n", decision.reason);
    if (decision.kind == Decision::Kind::rejected) feedback += fmt::format("  {}\n", decision.reason);
  }
  if (!horizontal.empty()) text += "\nhorizontal fusion:\n" + horizontal;
  if (!feedback.empty()) {
    text += "\ngroups rejected by the loop level or split to keep the arena's peak:\n" + feedback;
  }
  return text;
}

}  // namespace kiln::fusion
