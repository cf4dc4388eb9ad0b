// Random graphs, partitioned greedily and by the ILP (reference profile), must give valid
// partitions (every node once, convex groups, dependency order) whose compiled results match
// the interpreter. The graphs mix elementwise and broadcast ops, row and column reductions,
// softmax and matmuls over [R, C], [R, 1] and [1, C] values, so groups stitch reductions,
// take matmul epilogues and are cut at matmul operands. KILN_FUSION_SEED=N replays one seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "interp/interpreter.h"
#include "ir/builder.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

class RandomGraph {
 public:
  explicit RandomGraph(uint64_t seed) : rng_(seed), builder_(graph_) {
    rows_ = pick(2, 9);
    cols_ = pick(2, 9);
    for (int i = 0; i < 3; ++i) values_.push_back(builder_.input(fmt::format("x{}", i), DType::f32, {rows_, cols_}));
    values_.push_back(builder_.input("row", DType::f32, {rows_, 1}));
    values_.push_back(builder_.input("col", DType::f32, {1, cols_}));
    weight_ = builder_.input("w", DType::f32, {cols_, cols_});
    const int nodes = pick(4, 18);
    for (int n = 0; n < nodes; ++n) values_.push_back(random_node());
    std::vector<Value*> outputs = {values_.back()};
    for (int extra = pick(0, 2); extra > 0; --extra) {
      Value* v = values_[static_cast<size_t>(pick(5, static_cast<int64_t>(values_.size()) - 1))];
      if (std::find(outputs.begin(), outputs.end(), v) == outputs.end()) outputs.push_back(v);
    }
    graph_.set_outputs(outputs);
  }

  Graph& graph() { return graph_; }

 private:
  int64_t pick(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  Value* any() { return values_[static_cast<size_t>(pick(0, static_cast<int64_t>(values_.size()) - 1))]; }
  Value* full() {
    for (int tries = 0; tries < 20; ++tries) {
      Value* v = any();
      if (v->shape() == Shape(std::vector<int64_t>{rows_, cols_})) return v;
    }
    return values_[0];
  }

  Value* random_node() {
    switch (pick(0, 9)) {
      case 0: return builder_.tanh(any());
      case 1: return builder_.sigmoid(any());
      case 2: return builder_.relu(builder_.neg(any()));
      case 3: return builder_.add(full(), any());
      case 4: return builder_.mul(any(), full());
      case 5: return builder_.sub(full(), any());
      case 6: return builder_.mean(full(), {1}, /*keepdims=*/true);
      case 7: return builder_.sum(full(), {0}, /*keepdims=*/true);
      case 8: return builder_.softmax(full());
      default: return builder_.matmul(full(), weight_);
    }
  }

  std::mt19937_64 rng_;
  Graph graph_;
  GraphBuilder builder_;
  int64_t rows_ = 0, cols_ = 0;
  std::vector<Value*> values_;
  Value* weight_ = nullptr;
};

std::vector<uint64_t> seeds() {
  if (const char* text = std::getenv("KILN_FUSION_SEED")) return {std::strtoull(text, nullptr, 10)};
  std::vector<uint64_t> all;
  for (uint64_t s = 1; s <= 12; ++s) all.push_back(s);
  return all;
}

TEST(FusionFuzz, RandomGraphsPartitionValidlyAndMatchTheInterpreter) {
  for (uint64_t seed : seeds()) {
    RandomGraph random(seed);
    const Graph& graph = random.graph();
    std::mt19937_64 rng(seed);
    std::vector<Array> inputs;
    for (const Value* input : graph.inputs()) {
      Array value(input->dtype(), input->shape());
      for (double& v : value.data) v = std::uniform_real_distribution<double>(-1, 1)(rng);
      value.round_to_dtype();
      inputs.push_back(std::move(value));
    }
    Expected<std::vector<Array>> expected = interpret(graph, inputs);
    ASSERT_TRUE(expected.has_value()) << expected.status().message();
    for (fusion::FusionMode mode : {fusion::FusionMode::greedy, fusion::FusionMode::ilp}) {
      SCOPED_TRACE(fmt::format("seed {} ({})", seed, fusion::fusion_mode_name(mode)));
      CompileOptions options;
      options.fusion.mode = mode;
      options.fusion.profile = cost::reference_profile();
      Expected<CompiledModel> model = Compiler(options).compile(graph.clone());
      ASSERT_TRUE(model.has_value()) << model.status().message();
      EXPECT_TRUE(fusion::check_partition(model->graph(), model->compiled().partition).is_ok());
      Expected<std::vector<Array>> actual = model->run(inputs);
      ASSERT_TRUE(actual.has_value()) << actual.status().message();
      for (size_t o = 0; o < expected->size(); ++o) {
        for (int64_t i = 0; i < (*expected)[o].size(); ++i) {
          const double want = (*expected)[o][i];
          ASSERT_NEAR((*actual)[o][i], want, 1e-4 * (1 + std::fabs(want)))
              << "output " << o << " element " << i << "\n"
              << fusion::explain_partition(model->graph(), model->compiled().partition);
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln
