// The synthetic GCN adjacency: a symmetric, renormalized CSR matrix with self loops and the
// requested average degree, the same for the same seed.
#include "models/synthetic_graph.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <utility>

namespace kiln {
namespace {

TEST(SyntheticGraph, IsASymmetricRenormalizedAdjacencyWithSelfLoops) {
  Expected<CsrMatrix> matrix = random_normalized_adjacency(50, 4, 7);
  ASSERT_TRUE(matrix) << matrix.status().message();
  ASSERT_EQ(matrix->row_ptr.size(), 51u);
  EXPECT_EQ(matrix->row_ptr.front(), 0);
  EXPECT_EQ(matrix->row_ptr.back(), matrix->nnz());
  std::map<std::pair<int64_t, int64_t>, double> entries;
  for (int64_t r = 0; r < 50; ++r) {
    for (int64_t i = matrix->row_ptr[r]; i < matrix->row_ptr[r + 1]; ++i) {
      if (i > matrix->row_ptr[r]) {
        EXPECT_LT(matrix->col_indices[i - 1], matrix->col_indices[i]);
      }
      entries[{r, matrix->col_indices[i]}] = matrix->values[i];
    }
  }
  for (int64_t r = 0; r < 50; ++r) {
    const int64_t degree = matrix->row_ptr[r + 1] - matrix->row_ptr[r];  // with the self loop
    ASSERT_TRUE(entries.contains({r, r}));
    EXPECT_DOUBLE_EQ(entries.at({r, r}), 1.0 / static_cast<double>(degree));
  }
  for (const auto& [position, value] : entries) {
    const auto [r, c] = position;
    ASSERT_TRUE(entries.contains({c, r}));
    EXPECT_EQ(value, entries.at({c, r}));
    const int64_t degree_r = matrix->row_ptr[r + 1] - matrix->row_ptr[r];
    const int64_t degree_c = matrix->row_ptr[c + 1] - matrix->row_ptr[c];
    EXPECT_DOUBLE_EQ(value, 1.0 / std::sqrt(static_cast<double>(degree_r * degree_c)));
  }
  // 100 undirected edges, each stored twice, plus 50 self loops.
  EXPECT_EQ(matrix->nnz(), 2 * 100 + 50);
}

TEST(SyntheticGraph, SameSeedSameGraph) {
  Expected<CsrMatrix> a = random_normalized_adjacency(30, 3, 1);
  Expected<CsrMatrix> b = random_normalized_adjacency(30, 3, 1);
  Expected<CsrMatrix> c = random_normalized_adjacency(30, 3, 2);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->col_indices, b->col_indices);
  EXPECT_EQ(a->values, b->values);
  EXPECT_NE(a->col_indices, c->col_indices);
}

TEST(SyntheticGraph, CompleteGraphAndErrors) {
  Expected<CsrMatrix> complete = random_normalized_adjacency(5, 4, 0);
  ASSERT_TRUE(complete);
  EXPECT_EQ(complete->nnz(), 25);
  EXPECT_FALSE(random_normalized_adjacency(5, 4.5, 0));
  EXPECT_FALSE(random_normalized_adjacency(0, 1, 0));
  EXPECT_FALSE(random_normalized_adjacency(5, -1, 0));
}

}  // namespace
}  // namespace kiln
