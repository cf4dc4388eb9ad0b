#include "fusion/rules.h"

#include <algorithm>
#include <array>
#include <vector>

#include <fmt/format.h>

#include "loop/lower_group.h"

namespace kiln::fusion {
namespace {

constexpr std::array kRules = {
    FusionRule{"inline-producer",
               "elementwise, broadcast or injective producers are inlined into their consumer"},
    FusionRule{"stitch-reduction",
               "a reduction and its elementwise or reduction consumers share a kernel, the "
               "reduced values in a local buffer"},
    FusionRule{"matmul-epilogue",
               "elementwise consumers of a floating matmul run on each output block after its "
               "gemm"},
    FusionRule{"conv-epilogue",
               "elementwise consumers of a floating conv or conv_grad_data run on each image's "
               "block after its gemm"},
    FusionRule{"horizontal",
               "independent elementwise groups over the same elements run in one kernel"},
    FusionRule{"cut-tied-edges",
               "an edge whose producer reaches its consumer through another component is cut "
               "before partitioning; exact, since no convex group could hold both ends"},
};

EdgeVerdict cut(std::string reason) { return {false, "", std::move(reason)}; }

// How many windows of a pooling op read an input element, on average: the kernel volume over
// the stride volume (1 when windows tile the input; 2.25 for ResNet's 3x3 stride-2 max pool).
// 0 for ops without windows.
double window_overlap(const Node& node) {
  if (node.op() != Op::max_pool && node.op() != Op::avg_pool) return 0;
  const std::vector<int64_t>& kernel = node.attrs().get_ints("kernel");
  const std::vector<int64_t>& strides = node.attrs().get_ints("strides");
  double overlap = 1;
  for (size_t d = 0; d < kernel.size(); ++d) {
    const int64_t stride = d < strides.size() ? strides[d] : 1;
    overlap *= static_cast<double>(kernel[d]) / static_cast<double>(std::max<int64_t>(stride, 1));
  }
  return overlap;
}

// The rule that would allow the edge, or the reason none does.
EdgeVerdict applicable_rule(const Node& producer, const Node& consumer) {
  const FusionKind from = producer.def().fusion_kind;
  const FusionKind to = consumer.def().fusion_kind;
  if (to == FusionKind::contraction) {
    return cut(fmt::format("'{}' is an operand of the contraction '{}': the library reads it "
                           "from memory, so it is stored in full either way",
                           producer.op_name(), consumer.op_name()));
  }
  if (producer.def().collective || consumer.def().collective) {
    const Node& collective = producer.def().collective ? producer : consumer;
    return cut(fmt::format("'{}' is a collective: it runs between kernels, as a program step of "
                           "its own",
                           collective.op_name()));
  }
  if (from == FusionKind::opaque || to == FusionKind::opaque) {
    const Node& opaque = from == FusionKind::opaque ? producer : consumer;
    return cut(fmt::format("'{}' is opaque: lowered in gather form, it reads its inputs many "
                           "times",
                           opaque.op_name()));
  }
  if (is_inlinable(from) && window_overlap(consumer) > 1) {
    // Window code is scalar, and an inlined producer runs once per window that reads an
    // element: ResNet-50's batch norm + relu inlined into its 3x3 stride-2 max pool ran
    // 54 ms against 34 ms as separate kernels.
    return cut(fmt::format("the windows of '{}' overlap: an inlined '{}' would be evaluated "
                           "{:.2f} times per element, in scalar window code",
                           consumer.op_name(), producer.op_name(), window_overlap(consumer)));
  }
  if (is_inlinable(from)) {
    return {true, "inline-producer", fmt::format("'{}' is inlined into '{}'", producer.op_name(),
                                                 consumer.op_name())};
  }
  if (from == FusionKind::reduction) {
    if (reads_at_own_index(to) || to == FusionKind::reduction) {
      return {true, "stitch-reduction",
              fmt::format("'{}' is computed into a local buffer that '{}' reads",
                          producer.op_name(), consumer.op_name())};
    }
    return cut(fmt::format("'{}' reads the reduction '{}' through a layout change",
                           consumer.op_name(), producer.op_name()));
  }
  if (from == FusionKind::contraction) {
    const bool conv = loop::conv_takes_epilogue(producer);
    if (!loop::lowers_matmul_to_gemm(producer) && !conv) {
      return cut(fmt::format("epilogues are lowered for floating matmuls, convs and "
                             "conv_grad_datas only, not '{}' of {}",
                             producer.op_name(), dtype_name(producer.output(0)->dtype())));
    }
    if (!reads_at_own_index(to) || consumer.output(0)->shape() != producer.output(0)->shape()) {
      return cut(fmt::format("'{}' does not read the product element by element in its shape, "
                             "so it cannot run on the product's blocks",
                             consumer.op_name()));
    }
    if (conv) {
      return {true, "conv-epilogue",
              fmt::format("'{}' runs on each image's block of the '{}'", consumer.op_name(),
                          producer.op_name())};
    }
    return {true, "matmul-epilogue",
            fmt::format("'{}' runs on each block of the matmul", consumer.op_name())};
  }
  return cut(fmt::format("no rule fuses '{}' into '{}'", producer.op_name(), consumer.op_name()));
}

}  // namespace

std::span<const FusionRule> fusion_rules() { return kRules; }

EdgeVerdict classify_edge(const Node& producer, const Node& consumer,
                          const std::set<std::string>& disabled_rules) {
  EdgeVerdict verdict = applicable_rule(producer, consumer);
  if (verdict.fusible && disabled_rules.contains(verdict.rule)) {
    return cut(fmt::format("rule '{}' is disabled", verdict.rule));
  }
  return verdict;
}

}  // namespace kiln::fusion
