// GCN: the two-layer graph convolutional network of Kipf and Welling (2017),
//   logits = Â relu(Â X W1 + b1) W2 + b2,
// with Â the renormalized adjacency of a synthetic random graph (models/synthetic_graph.h)
// held in CSR form as data inputs adjacency.{row_ptr, col_indices, values}, and multiplied
// by spmm. Node features are N(0, 1). The loss is the mean cross-entropy over all nodes
// against integer labels. Weights He (LeCun before the logits) normal over fan-in; biases zero.
//
// ONNX has no sparse product: the portable inference graph (ModelOptions::portable) takes Â
// as a dense [nodes, nodes] data input `adjacency` and multiplies by matmul.
#include <cmath>

#include "models/presets.h"
#include "models/synthetic_graph.h"

namespace kiln {
namespace {

struct GcnConfig {
  int64_t nodes = 0;
  double avg_degree = 0;
  int64_t features = 0;
  int64_t hidden = 0;
  int64_t classes = 0;
};

// The adjacency's inputs and the product Â x, for one graph.
class Adjacency {
 public:
  Adjacency(ModelBuilder& m, const CsrMatrix& csr) : m_(m) {
    if (m.portable()) {
      Array dense(DType::f32, Shape{csr.rows, csr.cols});
      for (int64_t r = 0; r < csr.rows; ++r) {
        for (int64_t i = csr.row_ptr[r]; i < csr.row_ptr[r + 1]; ++i) {
          dense[r * csr.cols + csr.col_indices[i]] = csr.values[i];
        }
      }
      dense_ = m.data("adjacency", DType::f32, {csr.rows, csr.cols}, given_init(std::move(dense)));
      return;
    }
    const int64_t nnz = csr.nnz();
    row_ptr_ = m.data("adjacency.row_ptr", DType::i64, {csr.rows + 1},
                      given_init(index_array(csr.row_ptr)));
    col_indices_ = m.data("adjacency.col_indices", DType::i64, {nnz},
                          given_init(index_array(csr.col_indices)));
    values_ = m.data("adjacency.values", DType::f32, {nnz},
                     given_init(Array(DType::f32, Shape{nnz}, csr.values)));
  }

  Value* times(Value* x) {
    if (m_.portable()) return m_.b().matmul(dense_, x);
    return m_.b().apply1(Op::spmm, {row_ptr_, col_indices_, values_, x});
  }

 private:
  static Array index_array(const std::vector<int64_t>& values) {
    return Array(DType::i64, Shape{static_cast<int64_t>(values.size())},
                 std::vector<double>(values.begin(), values.end()));
  }

  ModelBuilder& m_;
  Value* row_ptr_ = nullptr;
  Value* col_indices_ = nullptr;
  Value* values_ = nullptr;
  Value* dense_ = nullptr;  // portable form
};

Expected<std::vector<Value*>> build_gcn(ModelBuilder& m, const GcnConfig& config,
                                        const ModelOptions& options) {
  KILN_ASSIGN_OR_RETURN(const int64_t nodes, size_option(options.nodes, config.nodes, "nodes"));
  KILN_ASSIGN_OR_RETURN(const CsrMatrix csr,
                        random_normalized_adjacency(
                            nodes, options.avg_degree.value_or(config.avg_degree), options.seed));
  GraphBuilder& b = m.b();
  Adjacency adjacency(m, csr);
  Value* features = m.data("features", DType::f32, {nodes, config.features}, normal_init(1));
  Value* h =
      adjacency.times(b.matmul(features, m.parameter("gc1.w", {config.features, config.hidden},
                                                     fan_init(config.features, std::sqrt(2.0)))));
  h = b.relu(b.add(h, m.parameter("gc1.b", {config.hidden}, constant_init(0))));
  Value* logits = adjacency.times(b.matmul(
      h, m.parameter("gc2.w", {config.hidden, config.classes}, fan_init(config.hidden, 1.0))));
  logits = b.add(logits, m.parameter("gc2.b", {config.classes}, constant_init(0)));
  if (!m.is_loss()) return std::vector<Value*>{logits};
  Value* labels = m.data("labels", DType::i64, {nodes}, uniform_int_init(config.classes));
  return std::vector<Value*>{b.cross_entropy(logits, labels), logits};
}

Preset gcn_preset(std::string name, GcnConfig config) {
  std::string description = fmt::format(
      "GCN, 2 layers: {} features, hidden {}, {} classes; random graph of {} nodes, average "
      "degree {}",
      config.features, config.hidden, config.classes, config.nodes, config.avg_degree);
  return {{std::move(name), "gcn", std::move(description)},
          [config](ModelBuilder& m, const ModelOptions& options) {
            return build_gcn(m, config, options);
          }};
}

}  // namespace

std::vector<Preset> gcn_presets() {
  // gcn-cora has Cora's sizes: 2,708 nodes, 5,278 edges (average degree 3.9), 1,433 features,
  // 7 classes, and Kipf and Welling's 16 hidden units.
  return {
      gcn_preset("gcn-tiny",
                 {.nodes = 32, .avg_degree = 4, .features = 16, .hidden = 16, .classes = 4}),
      gcn_preset("gcn-cora",
                 {.nodes = 2708, .avg_degree = 3.9, .features = 1433, .hidden = 16, .classes = 7})};
}

}  // namespace kiln
