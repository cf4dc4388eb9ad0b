#include "ir/ops/op_family.h"

namespace kiln::ops {

void register_layout_ops(OpTable& /*table*/) {}

}  // namespace kiln::ops
