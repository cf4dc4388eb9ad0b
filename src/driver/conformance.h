// The ONNX conformance runner: imports each case of an ONNX backend-test folder (model.onnx and
// test_data_set_0/{input,output}_N.pb), runs it with the reference interpreter or compiled
// (kiln::Compiler, one kernel per node) and compares the outputs with ONNX's expected ones.
//
// A case passes when every output has the expected dtype and shape and every element is within
// atol + rtol * |expected| (1e-5 and 1e-3 for floating outputs, exact for integers and bool;
// NaN matches NaN). It is *unsupported* when the import fails because Kiln lacks an operator,
// attribute value or element type, and *failed* for any other error or mismatch.
#pragma once

#include <string>
#include <vector>

#include "driver/compare.h"

namespace kiln {

enum class CaseOutcome { passed, failed, unsupported };

struct CaseResult {
  std::string name;  // the case folder's name, e.g. "test_add_bcast"
  CaseOutcome outcome = CaseOutcome::failed;
  std::string detail;  // why it failed or is unsupported; empty when it passed
};

enum class Engine { interpreter, compiled };

struct ConformanceOptions {
  Tolerance tolerance;
  Engine engine = Engine::interpreter;
};

CaseResult run_conformance_case(const std::string& case_dir,
                                const ConformanceOptions& options = {});

// Every case folder directly under `suite_dir` (those holding a model.onnx), sorted by name.
std::vector<std::string> conformance_case_dirs(const std::string& suite_dir);

// run_conformance_case on every case folder, in that order.
std::vector<CaseResult> run_conformance_suite(const std::string& suite_dir,
                                              const ConformanceOptions& options = {});

const char* outcome_name(CaseOutcome outcome);

}  // namespace kiln
