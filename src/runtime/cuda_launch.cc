#include "runtime/cuda_launch.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>

namespace kiln::runtime {
namespace {

// The line's words, split at spaces.
std::vector<std::string_view> words_of(std::string_view line) {
  std::vector<std::string_view> words;
  while (!line.empty()) {
    const size_t space = line.find(' ');
    if (space != 0) words.push_back(line.substr(0, space));
    if (space == std::string_view::npos) break;
    line.remove_prefix(space + 1);
  }
  return words;
}

// Reads words[first, first + values.size()) as integers into `values`.
bool read_integers(const std::vector<std::string_view>& words, size_t first,
                   std::initializer_list<int64_t*> values) {
  if (words.size() != first + values.size()) return false;
  size_t i = first;
  for (int64_t* value : values) {
    const std::string_view word = words[i++];
    const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), *value);
    if (error != std::errc() || end != word.data() + word.size()) return false;
  }
  return true;
}

bool read_flag(int64_t value, bool& flag) {
  flag = value != 0;
  return value == 0 || value == 1;
}

}  // namespace

std::string serialize_launches(const CudaKernelLaunches& launches) {
  std::string text;
  for (const std::vector<CudaLaunch>& kernel : launches) {
    text += "kernel\n";
    for (const CudaLaunch& launch : kernel) {
      text += fmt::format("launch {} {} {} {} {} {} {}\n", launch.function, launch.grid[0],
                          launch.grid[1], launch.grid[2], launch.block[0], launch.block[1],
                          launch.block[2]);
      for (const CudaLaunchArg& arg : launch.args) {
        text += arg.kind == CudaLaunchArg::Kind::buffer
                    ? fmt::format("buffer {} {}\n", arg.param, arg.byte_offset)
                    : fmt::format("i64 {}\n", arg.value);
      }
      if (const std::optional<CudaGemm>& g = launch.gemm) {
        text += fmt::format("gemm {} {} {} {} {} {} {} {:d} {:d} {:d} {} {} {} {}\n",
                            g->type == CudaGemm::Type::f32 ? "f32" : "f64", g->m, g->n, g->k,
                            g->lda, g->ldb, g->ldc, g->transpose_a, g->transpose_b, g->accumulate,
                            g->batch, g->stride_a, g->stride_b, g->stride_c);
      }
    }
  }
  return text;
}

Expected<CudaKernelLaunches> deserialize_launches(std::string_view text) {
  CudaKernelLaunches launches;
  int line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t newline = text.find('\n');
    if (newline == std::string_view::npos) return Status::error("launches: the text is cut off");
    const std::vector<std::string_view> words = words_of(text.substr(0, newline));
    text.remove_prefix(newline + 1);
    const auto refuse = [&] {
      return Status::errorf("launches: line {} does not read as a launch", line_number);
    };
    if (words.empty()) return refuse();
    const std::string_view what = words[0];
    if (what == "kernel" && words.size() == 1) {
      launches.emplace_back();
      continue;
    }
    if (launches.empty()) return refuse();
    std::vector<CudaLaunch>& kernel = launches.back();
    if (what == "launch") {
      if (words.size() != 8) return refuse();
      CudaLaunch& launch = kernel.emplace_back();
      launch.function = std::string(words[1]);
      if (!read_integers(words, 2, {&launch.grid[0], &launch.grid[1], &launch.grid[2],
                                    &launch.block[0], &launch.block[1], &launch.block[2]})) {
        return refuse();
      }
      continue;
    }
    if (kernel.empty()) return refuse();
    CudaLaunch& launch = kernel.back();
    if (what == "buffer") {
      int64_t param = 0;
      CudaLaunchArg& arg = launch.args.emplace_back();
      if (!read_integers(words, 1, {&param, &arg.byte_offset}) || param < 0 ||
          param > std::numeric_limits<int>::max()) {
        return refuse();
      }
      arg.param = static_cast<int>(param);
    } else if (what == "i64") {
      CudaLaunchArg& arg = launch.args.emplace_back();
      arg.kind = CudaLaunchArg::Kind::i64;
      if (!read_integers(words, 1, {&arg.value})) return refuse();
    } else if (what == "gemm" && words.size() == 15 && !launch.gemm) {
      CudaGemm& g = launch.gemm.emplace();
      if (words[1] != "f32" && words[1] != "f64") return refuse();
      g.type = words[1] == "f32" ? CudaGemm::Type::f32 : CudaGemm::Type::f64;
      int64_t transpose_a = 0, transpose_b = 0, accumulate = 0;
      if (!read_integers(words, 2, {&g.m, &g.n, &g.k, &g.lda, &g.ldb, &g.ldc, &transpose_a,
                                    &transpose_b, &accumulate, &g.batch, &g.stride_a,
                                    &g.stride_b, &g.stride_c}) ||
          !read_flag(transpose_a, g.transpose_a) || !read_flag(transpose_b, g.transpose_b) ||
          !read_flag(accumulate, g.accumulate)) {
        return refuse();
      }
    } else {
      return refuse();
    }
  }
  return launches;
}

}  // namespace kiln::runtime
