// Partitioning a graph into fused kernels: which nodes share a kernel, and why.
//
// Three modes. `off` gives every node its own kernel (the unfused baseline). `greedy` walks the
// nodes in graph order and merges a node's group with a producer's group across a fusible edge
// (fusion/rules.h) whenever the merged group is convex and the cost model
// (cost/estimate.h) says one kernel is faster than two: TorchInductor's and XLA's producer-
// consumer fusion, priced. `ilp` chooses the partition of least estimated time exactly, over
// candidate groups, by integer linear programming (fusion/ilp.cc): it starts from the greedy
// partition and is never worse than it in estimated time. Both then fuse horizontally:
// independent groups of elementwise nodes over the same elements (the optimizer's updates of
// parameters of one shape) merge while the cost model gains, one kernel call for several.
//
// Every computed node is in exactly one group; constants are in none (their values are
// kernel inputs). Groups are convex and listed in an order that respects their dependencies,
// ready for the pipeline's lower stage (compiler/pipeline.h). Each group is also checked at the
// loop level: it must lower (loop/lower_group.h) within FusionOptions::max_local_bytes of local
// buffers; a group that does not is forbidden and the partition chosen again, and the
// explanation records the round trip.
//
// `decisions` explain the result: for every edge between two computed nodes whether it is
// inside a group (and by which rule) or cut (and why: no rule allows it, a rule is disabled,
// fusing would make a group non-convex, the cost model prefers two kernels, or the loop level
// rejected the group), and the horizontal merges.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cost/device_profile.h"
#include "cost/estimate.h"
#include "ir/graph.h"
#include "loop/stmt.h"
#include "support/status.h"

namespace kiln::fusion {

enum class FusionMode { off, greedy, ilp };

std::string_view fusion_mode_name(FusionMode mode);
Expected<FusionMode> parse_fusion_mode(std::string_view name);  // "off", "greedy" or "ilp"

struct FusionOptions {
  FusionMode mode = FusionMode::ilp;
  // The machine the cost model prices kernels for; empty: this one (cost::host_device_profile,
  // measured once and cached). Tests pin cost::reference_profile() for reproducible partitions.
  std::optional<cost::DeviceProfile> profile;
  std::set<std::string> disabled_rules;  // names from fusion_rules()
  // Candidate groups the ILP considers per component (connected groups of up to the largest
  // size whose count stays within this), besides the greedy partition's groups.
  int max_candidates = 20000;
  int max_group_nodes = 64;
  double ilp_seconds_per_component = 2;  // then the best solution found is used
  // Loop-level limit: a group whose kernel would allocate more local buffer bytes is rejected.
  int64_t max_local_bytes = int64_t{1} << 30;
  // The target's check of a kernel's library calls (target/target.h: runs_library_calls): a
  // group whose kernel makes a call no library of the target runs is rejected, as the loop
  // level's verdict, and the partition solved again without it. `library_table` names the
  // check, since verdicts are remembered across partitions. Empty: every call runs.
  std::function<Status(const loop::Kernel&)> library_calls = nullptr;
  std::string library_table;
};

struct Decision {
  enum class Kind { fused, cut, rejected, horizontal };
  Kind kind = Kind::cut;
  const Node* producer = nullptr;  // the edge (fused or cut); null for the other kinds
  const Node* consumer = nullptr;
  std::string rule;                // the rule that fused the edge
  std::string reason;
};

struct Group {
  std::vector<Node*> nodes;  // in graph order
  cost::KernelEstimate estimate;
};

struct PartitionStats {
  int tied_edges_cut = 0;      // fusible edges cut before partitioning (fusion/context.h)
  int components = 0;          // independent subproblems (ilp)
  int components_cached = 0;   // of which solved before (identical structure)
  int candidates = 0;          // candidate groups over all solved components
  int ilp_rounds = 0;          // solves, counting re-solves after a cycle or a rejection
  int components_timed_out = 0;
  double seconds = 0;          // time spent partitioning
};

struct Partition {
  FusionMode mode = FusionMode::off;
  cost::DeviceProfile profile;  // the estimates' machine
  std::vector<Group> groups;  // dependencies first
  std::vector<Decision> decisions;
  PartitionStats stats;

  // The groups that store something (the rest give only views), less the collectives, which
  // run as program steps of their own.
  int num_kernels() const;
  double estimated_seconds() const;
  int64_t estimated_bytes() const;
  std::vector<std::vector<Node*>> node_groups() const;
};

Expected<Partition> partition_graph(const Graph& graph, const FusionOptions& options = {});

// Independent validation: every non-constant node in exactly one group, no constant in any,
// every group convex, and every group after the groups computing its inputs.
Status check_partition(const Graph& graph, const Partition& partition);

// `kiln explain`: the groups with their nodes, estimated time and bytes saved against running
// the nodes alone, and every cut edge with its reason.
std::string explain_partition(const Graph& graph, const Partition& partition);

}  // namespace kiln::fusion
