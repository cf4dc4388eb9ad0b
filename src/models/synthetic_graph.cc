#include "models/synthetic_graph.h"

#include <cmath>
#include <set>
#include <utility>

#include "interp/random_inputs.h"

namespace kiln {

Expected<CsrMatrix> random_normalized_adjacency(int64_t nodes, double avg_degree, uint64_t seed) {
  if (nodes < 1) return Status::errorf("a graph needs at least 1 node, got {}", nodes);
  if (!(avg_degree >= 0)) return Status::errorf("average degree must be >= 0, got {}", avg_degree);
  const auto edges =
      static_cast<int64_t>(std::llround(static_cast<double>(nodes) * avg_degree / 2));
  if (edges > nodes * (nodes - 1) / 2) {
    return Status::errorf("average degree {} is more than a graph of {} nodes can have", avg_degree,
                          nodes);
  }
  // Endpoints come in batches of candidate pairs until enough distinct edges are drawn.
  std::set<std::pair<int64_t, int64_t>> entries;  // both directions
  for (uint64_t round = 0; static_cast<int64_t>(entries.size()) < 2 * edges; ++round) {
    const Array ends = random_array({DType::i64, Shape{2 * edges}}, seed + round, nodes);
    for (int64_t i = 0; i < edges && static_cast<int64_t>(entries.size()) < 2 * edges; ++i) {
      const auto u = static_cast<int64_t>(ends[2 * i]);
      const auto v = static_cast<int64_t>(ends[2 * i + 1]);
      if (u == v) continue;
      entries.insert({u, v});
      entries.insert({v, u});
    }
  }
  for (int64_t i = 0; i < nodes; ++i) entries.insert({i, i});

  std::vector<double> degree(static_cast<size_t>(nodes), 0);
  for (const auto& [row, col] : entries) degree[static_cast<size_t>(row)] += 1;
  CsrMatrix matrix;
  matrix.rows = matrix.cols = nodes;
  matrix.row_ptr.push_back(0);
  for (const auto& [row, col] : entries) {
    while (static_cast<int64_t>(matrix.row_ptr.size()) <= row) {
      matrix.row_ptr.push_back(matrix.nnz());
    }
    matrix.col_indices.push_back(col);
    matrix.values.push_back(
        1.0 / std::sqrt(degree[static_cast<size_t>(row)] * degree[static_cast<size_t>(col)]));
  }
  matrix.row_ptr.push_back(matrix.nnz());
  return matrix;
}

}  // namespace kiln
