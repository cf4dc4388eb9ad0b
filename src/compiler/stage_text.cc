#include "compiler/stage_text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "compiler/stages.h"
#include "ir/printer.h"
#include "loop/printer.h"

namespace kiln {
namespace {

// `text` with every line made a `//` comment.
std::string as_comment(const std::string& text) {
  std::string commented;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const size_t stop = end == std::string::npos ? text.size() : end;
    commented += "//   " + text.substr(start, stop - start) + "\n";
    start = stop + 1;
  }
  return commented;
}

}  // namespace

std::string kernel_calls_text(std::span<const KernelRecord> records) {
  std::string text;
  for (size_t r = 0; r < records.size(); ++r) {
    text += fmt::format("// kernel call {}: {}\n{}", r, kernel_label(records[r].nodes),
                        loop::print(records[r].kernel));
  }
  return text;
}

std::string shared_kernels_text(std::span<const loop::Kernel> kernels,
                                std::span<const KernelRecord> records) {
  std::vector<std::vector<size_t>> calls(kernels.size());
  for (size_t r = 0; r < records.size(); ++r) {
    calls[static_cast<size_t>(records[r].program_kernel)].push_back(r);
  }
  std::string text;
  for (size_t k = 0; k < kernels.size(); ++k) {
    text += fmt::format("// kernel {}, run by kernel calls {}\n{}", k, fmt::join(calls[k], ", "),
                        loop::print(kernels[k]));
  }
  return text;
}

std::string program_kernels_text(const CompiledGraph& compiled) {
  std::string text;
  std::vector<bool> printed(compiled.program ? static_cast<size_t>(compiled.program->num_kernels)
                                             : size_t{0});
  for (const KernelRecord& record : compiled.records) {
    const auto k = static_cast<size_t>(record.program_kernel);
    if (k >= printed.size() || printed[k]) continue;
    printed[k] = true;
    std::string how = compiled.cuda ? "mapped onto the GPU\n" : "scheduled by:\n";
    if (!compiled.cuda) {
      const std::string schedule = loop::print(record.schedule);
      how += schedule.empty() ? "//   (none)\n" : as_comment(schedule);
    }
    text += fmt::format("// kernel {}, {}{}\n", k, how, loop::print(record.kernel));
  }
  return text;
}

std::string plan_text(const CompiledGraph& compiled) {
  std::string text = runtime::print_program(*compiled.program);
  text += "\nkernel calls:\n";
  for (const KernelRecord& record : compiled.records) {
    std::vector<std::string> nodes;
    for (const Node* node : record.nodes) {
      nodes.push_back(fmt::format("{} -> {}", node->op_name(), print_value_ref(*node->output())));
    }
    text += fmt::format("kernel {}: {}\n", record.program_kernel, fmt::join(nodes, "; "));
  }
  return text;
}

std::string cuda_launches_text(const CompiledGraph& compiled) {
  std::string text = fmt::format("\nCUDA ({}, {} bytes of cubin): launches per kernel\n",
                                 compiled.cuda->architecture, compiled.cuda->cubin.size());
  std::vector<bool> printed(compiled.cuda->launches.size(), false);
  for (const KernelRecord& record : compiled.records) {
    const auto k = static_cast<size_t>(record.program_kernel);
    if (printed[k]) continue;
    printed[k] = true;
    std::vector<std::string_view> nodes;
    for (const Node* node : record.nodes) nodes.push_back(node->op_name());
    text += fmt::format("kernel {} ({}):\n", k, fmt::join(nodes, "+"));
    for (const runtime::CudaLaunch& launch : compiled.cuda->launches[k]) {
      text += fmt::format("  {} grid {} x block {}\n", launch.function, fmt::join(launch.grid, "x"),
                          fmt::join(launch.block, "x"));
    }
  }
  return text;
}

std::string schedules_text(std::span<const KernelRecord> records) {
  const auto micros = [](double seconds) { return fmt::format("{:.1f} us", seconds * 1e6); };
  int chosen = 0, searched = 0;
  std::string text;
  for (size_t k = 0; k < records.size(); ++k) {
    const KernelRecord& record = records[k];
    const loop::SearchReport& report = record.search;
    std::string line = fmt::format("kernel {} {}: {}", k, kernel_label(record.nodes), report.how);
    if (report.how == "searched") {
      line += fmt::format(" ({} candidates, {} timed)", report.candidates, report.timed);
    }
    if (report.default_measured > 0) {
      ++searched;
      const double speedup = report.default_measured / report.measured;
      chosen += speedup > 1 ? 1 : 0;
      line += fmt::format(": estimate {}, measured {}, default {} ({:.2f}x)",
                          micros(report.estimate), micros(report.measured),
                          micros(report.default_measured), speedup);
    }
    text += line + "\n";
    for (const loop::Directive& directive : record.schedule.directives) {
      text += fmt::format("  {}\n", loop::print(directive));
    }
    for (const std::string& disagreement : report.disagreements) {
      text += fmt::format("  computed something else (a bug): {}\n", disagreement);
    }
  }
  return fmt::format("schedules: {} of {} kernel calls searched or cached, {} chosen over the "
                     "default\n{}",
                     searched, records.size(), chosen, text);
}

}  // namespace kiln
