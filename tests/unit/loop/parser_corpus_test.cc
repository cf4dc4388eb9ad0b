// Every kernel the lowering tests make, read back from its text in each form the compiler gives
// it (round_trip_check.h: lowered, scheduled for two targets, mapped onto a GPU), printing the
// same, verifying and computing bit-identical results: the one-op groups of every op's lowering
// cases (lowering_op_cases.h), and the fused groups of the lowering tests (fused_graphs.h:
// primitives fused into one kernel, matmuls and convolutions with their epilogues, in blocks of
// a few rows as gemm_test.cc lowers them too), and the example transformer layer lowered
// whole and node by node.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ir/builder.h"
#include "ir/parser.h"
#include "support/files.h"
#include "unit/loop/fused_graphs.h"
#include "unit/loop/lowering_op_cases.h"
#include "unit/loop/round_trip_check.h"

namespace kiln::loop {
namespace {

using testing::graph_round_trips;

class OpLoweringCases : public ::testing::TestWithParam<testing::op_cases::CaseList> {};

TEST_P(OpLoweringCases, ReadBackInEveryCompiledForm) {
  GetParam().run(testing::OpCheck(testing::op_round_trips));
}

INSTANTIATE_TEST_SUITE_P(LoopParserCorpus, OpLoweringCases,
                         ::testing::ValuesIn(testing::op_cases::kAll),
                         [](const auto& test) { return std::string(test.param.name); });

TEST(LoopParserCorpus, FusedPrimitivesReadBack) {
  for (DType dtype : {DType::f32, DType::f64}) {
    Graph graph;
    GraphBuilder b(graph);
    graph.set_outputs(
        {testing::layer_norm_chain(b, b.input("x", dtype, {3, 7}), b.input("scale", dtype, {7}),
                                   b.input("bias", dtype, {7}))});
    EXPECT_TRUE(graph_round_trips(graph)) << dtype_name(dtype);
  }
  EXPECT_TRUE(graph_round_trips(testing::math_calls_read_thrice_graph()));
  EXPECT_TRUE(graph_round_trips(testing::softmax_from_primitives_graph()));
  EXPECT_TRUE(graph_round_trips(testing::batch_norm_relu_graph()));
}

TEST(LoopParserCorpus, MatmulsAndTheirEpiloguesReadBack) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const testing::MatmulCase& c : testing::matmul_cases()) {
      EXPECT_TRUE(graph_round_trips(testing::matmul_graph(dtype, c)));
    }
  }
  for (int64_t rows : {0, 3}) {
    const LowerGroupOptions blocks{.gemm_block_rows = rows};
    EXPECT_TRUE(graph_round_trips(testing::bias_relu_graph(DType::f32, 7, 5, 3), blocks));
    for (const testing::MatmulCase& c : testing::softmax_epilogue_cases()) {
      EXPECT_TRUE(graph_round_trips(testing::softmax_epilogue_graph(c), blocks));
    }
    EXPECT_TRUE(graph_round_trips(testing::row_statistics_epilogue_graph(), blocks));
    EXPECT_TRUE(graph_round_trips(testing::layer_norm_of_gelu_epilogue_graph(), blocks));
  }
}

TEST(LoopParserCorpus, ConvolutionsAndTheirEpiloguesReadBack) {
  for (const testing::ConvCase& c : testing::conv_cases()) {
    for (const Graph& graph : testing::conv_graphs(DType::f32, c)) {
      EXPECT_TRUE(graph_round_trips(graph));
    }
    for (int op : {0, 1})
      EXPECT_TRUE(graph_round_trips(testing::conv_epilogue_graph(DType::f64, c, op)));
  }
}

TEST(LoopParserCorpus, TheExampleEncoderLayerReadsBack) {
  const char* source_dir = std::getenv("KILN_SOURCE_DIR");
  ASSERT_NE(source_dir, nullptr) << "KILN_SOURCE_DIR is not set (ctest sets it to the source tree)";
  Expected<std::string> text = read_file(std::string(source_dir) + "/examples/encoder_layer.kiln");
  ASSERT_TRUE(text.has_value()) << text.status().message();
  Expected<Graph> graph = parse_graph(*text, "encoder_layer.kiln");
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  EXPECT_TRUE(graph_round_trips(*graph));
  for (Node* node : graph->nodes()) {
    Expected<LoweredGroup> lowered = lower_group(*graph, std::span<Node* const>(&node, 1));
    ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
    EXPECT_TRUE(testing::compiled_forms_round_trip(lowered->kernel)) << node->op_name();
  }
}

}  // namespace
}  // namespace kiln::loop
