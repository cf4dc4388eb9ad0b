#include "ir/ops/op_family.h"

namespace kiln::ops {

void register_pooling_ops(OpTable& /*table*/) {}

}  // namespace kiln::ops
