#include "loop/lowering/group_context.h"

namespace kiln::loop::lowering {

std::vector<Expr> GroupContext::fresh_index(const std::vector<int64_t>& dims,
                                            std::vector<std::string>& vars) {
  std::vector<Expr> index;
  for (size_t d = 0; d < dims.size(); ++d) {
    vars.push_back(names().fresh("i"));
    index.push_back(var(vars.back()));
  }
  return index;
}

Stmt loop_nest(const std::vector<std::string>& vars, const std::vector<int64_t>& dims, Stmt body) {
  for (size_t d = vars.size(); d-- > 0;) body = for_loop(vars[d], 0, dims[d], body);
  return body;
}

}  // namespace kiln::loop::lowering
