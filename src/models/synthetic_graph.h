// Synthetic graphs for GCN: a random undirected graph turned into the normalized adjacency
// that graph convolutions multiply by, in CSR form.
//
// `random_normalized_adjacency(nodes, avg_degree, seed)` draws round(nodes * avg_degree / 2)
// distinct undirected edges between distinct nodes, uniformly, then returns Kipf and
// Welling's renormalized adjacency D^-1/2 (A + I) D^-1/2, where D counts each node's
// neighbours plus itself. It is symmetric, every row has its self loop, and columns are sorted
// within each row. The same arguments give the same matrix on every machine.
#pragma once

#include <cstdint>
#include <vector>

#include "support/status.h"

namespace kiln {

struct CsrMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<int64_t> row_ptr;  // rows + 1 entries, from 0 to nnz
  std::vector<int64_t> col_indices;
  std::vector<double> values;

  int64_t nnz() const { return static_cast<int64_t>(values.size()); }
};

// Errors when nodes < 1, avg_degree < 0, or the degree needs more edges than the complete
// graph has.
Expected<CsrMatrix> random_normalized_adjacency(int64_t nodes, double avg_degree, uint64_t seed);

}  // namespace kiln
