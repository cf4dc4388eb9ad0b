// The lowering table has a compute definition for every op.
#include <gtest/gtest.h>

#include "loop/compute.h"
#include "unit/test_util.h"

namespace kiln::loop {
namespace {

TEST(LoweringTable, EveryOpHasADefinition) {
  for (const OpDef& def : all_op_defs()) {
    EXPECT_TRUE(static_cast<bool>(lowering_of(def.op).compute))
        << "op '" << def.name << "' has no compute definition (loop/lowering/*.cc)";
  }
}

}  // namespace
}  // namespace kiln::loop
