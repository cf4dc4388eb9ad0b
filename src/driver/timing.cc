#include "driver/timing.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <functional>
#include <istream>
#include <ostream>
#include <string_view>

#include "compiler/tensor_bytes.h"

namespace kiln {

RunBuffers::RunBuffers(const Graph& graph, std::span<const Array> inputs) {
  for (const Array& input : inputs) {
    input_bytes_.push_back(encode_array(input));
    input_pointers_.push_back(input_bytes_.back().data());
  }
  for (const Value* output : graph.outputs()) add_output_in_order(*output);
}

void* RunBuffers::output(const Value& output) {
  auto found = output_by_name_.find(output.name());
  if (found == output_by_name_.end()) return add_output(output);
  return output_bytes_[found->second].data();
}

void* RunBuffers::add_output(const Value& output) {
  output_by_name_.emplace(output.name(), output_bytes_.size());
  return output_bytes_
      .emplace_back(
          static_cast<size_t>(output.shape().num_elements() * dtype_size_bytes(output.dtype())))
      .data();
}

void RunBuffers::add_output_in_order(const Value& value) {
  output(value);
  outputs_in_order_.emplace_back(value.type(), output_by_name_.at(value.name()));
}

Expected<RunBuffers> RunBuffers::encode(const Graph& graph,
                                        const std::function<Expected<Array>(size_t)>& make_input) {
  RunBuffers buffers;
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    KILN_ASSIGN_OR_RETURN(const Array input, make_input(i));
    buffers.input_bytes_.push_back(encode_array(input));
  }
  for (const std::vector<std::byte>& bytes : buffers.input_bytes_) {
    buffers.input_pointers_.push_back(bytes.data());
  }
  for (const Value* output : graph.outputs()) buffers.add_output_in_order(*output);
  return buffers;
}

Array RunBuffers::input_array(const Graph& graph, size_t index) const {
  return decode_array(graph.inputs().at(index)->type(), input_bytes_.at(index).data());
}

Array RunBuffers::output_array(size_t index) const {
  const auto& [type, slot] = outputs_in_order_.at(index);
  return decode_array(type, output_bytes_[slot].data());
}

size_t RunBuffers::output_digest(const Value& output) {
  const size_t bytes =
      static_cast<size_t>(output.shape().num_elements() * dtype_size_bytes(output.dtype()));
  return std::hash<std::string_view>{}(
      std::string_view(static_cast<const char*>(this->output(output)), bytes));
}

std::vector<size_t> RunBuffers::output_digests(const Graph& graph) {
  std::vector<size_t> digests;
  for (const Value* value : graph.outputs()) digests.push_back(output_digest(*value));
  return digests;
}

std::optional<std::string> RunBuffers::first_differing_output(const Graph& graph,
                                                              std::span<const size_t> digests) {
  for (size_t o = 0; o < graph.outputs().size() && o < digests.size(); ++o) {
    const Value& value = *graph.outputs()[o];
    if (output_digest(value) != digests[o]) return value.name();
  }
  return std::nullopt;
}

TimedRun::TimedRun(CompiledModel& model, RunBuffers& buffers, bool io_on_device)
    : model_(model), buffers_(buffers), io_on_device_(io_on_device) {
  for (const Value* output : model.graph().outputs()) {
    output_pointers_.push_back(buffers.output(*output));
  }
}

Expected<double> TimedRun::time_one(runtime::Profile* profile) {
  const auto start = std::chrono::steady_clock::now();
  KILN_RETURN_IF_ERROR(
      model_.run_raw(buffers_.inputs(), output_pointers_, profile, io_on_device_));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Expected<std::vector<double>> time_runs(CompiledModel& model, RunBuffers& buffers, int repeat,
                                        runtime::Profile* profile, bool io_on_device) {
  TimedRun run(model, buffers, io_on_device);
  std::vector<double> times;
  for (int r = 0; r < repeat; ++r) {
    KILN_ASSIGN_OR_RETURN(const double seconds, run.time_one(profile));
    times.push_back(seconds);
  }
  std::sort(times.begin(), times.end());
  return times;
}

Expected<std::vector<std::vector<double>>> time_interleaved(std::span<TimedRun*> runs, int repeat,
                                                            std::span<runtime::Profile*> profiles) {
  std::vector<std::vector<double>> times(runs.size());
  for (int r = 0; r < repeat; ++r) {
    for (size_t i = 0; i < runs.size(); ++i) {
      runtime::Profile* profile = i < profiles.size() ? profiles[i] : nullptr;
      KILN_RETURN_IF_ERROR(runs[i]->time_one(nullptr).status());
      KILN_ASSIGN_OR_RETURN(const double seconds, runs[i]->time_one(profile));
      times[i].push_back(seconds);
    }
  }
  for (std::vector<double>& run_times : times) std::sort(run_times.begin(), run_times.end());
  return times;
}

double median_of(std::span<const double> times) {
  return times.empty() ? 0 : times[times.size() / 2];
}

FusionProfile join_fusion_profile(const CompiledGraph& unfused,
                                  const runtime::Profile& unfused_profile,
                                  const CompiledGraph& fused,
                                  const runtime::Profile& fused_profile) {
  FusionProfile result;
  std::map<int64_t, double> node_seconds;  // by node id
  const double unfused_runs = std::max(unfused_profile.runs, 1);
  for (size_t s = 0; s < unfused.program->steps.size(); ++s) {
    const double seconds = unfused_profile.step_seconds[s] / unfused_runs;
    result.unfused_total += seconds;
    const int record = unfused.step_kernel_record[s];
    if (record < 0) continue;
    for (const Node* node : unfused.records[static_cast<size_t>(record)].nodes) {
      node_seconds[node->id()] += seconds;
      if (node->def().fusion_kind == FusionKind::contraction) {
        result.unfused_contractions += seconds;
      }
    }
  }
  const double fused_runs = std::max(fused_profile.runs, 1);
  for (size_t s = 0; s < fused.program->steps.size(); ++s) {
    const int record = fused.step_kernel_record[s];
    if (record < 0) continue;
    FusedKernelTime kernel{.step = s, .fused = fused_profile.step_seconds[s] / fused_runs};
    for (const Node* node : fused.records[static_cast<size_t>(record)].nodes) {
      if (auto it = node_seconds.find(node->id()); it != node_seconds.end()) {
        kernel.unfused += it->second;
      }
    }
    result.fused_total += kernel.fused;
    result.unfused_kernels_total += kernel.unfused;
    result.kernels.push_back(kernel);
  }
  std::sort(result.kernels.begin(), result.kernels.end(),
            [](const FusedKernelTime& a, const FusedKernelTime& b) {
              return a.fused - a.unfused > b.fused - b.unfused;
            });
  return result;
}

Status serve_timing_requests(std::istream& in, std::ostream& out, TimedRun& run) {
  std::string line;
  while (std::getline(in, line)) {
    int count = 0;
    const auto [end, error] = std::from_chars(line.data(), line.data() + line.size(), count);
    if (error != std::errc() || end != line.data() + line.size() || count < 1) {
      return Status::errorf("expected a positive run count, read '{}'", line);
    }
    std::string times = "seconds";
    for (int r = 0; r < count; ++r) {
      KILN_ASSIGN_OR_RETURN(const double seconds, run.time_one());
      times += fmt::format(" {:.9f}", seconds);
    }
    out << times << '\n' << std::flush;
  }
  return Status::ok();
}

}  // namespace kiln
