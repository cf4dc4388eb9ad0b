#include "runtime/cuda_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "runtime/cublaslt.h"
#include "runtime/cuda_driver.h"
#include "support/text.h"

namespace kiln::runtime {

#ifdef KILN_HAVE_CUDA_HEADERS

namespace {

// Device allocations start at this alignment, as the CPU arena's do (and more than any vector
// access needs).
constexpr int64_t kDeviceAlignment = 256;

// CUDA graphs kept per executor, one for each set of input and output addresses it ran on.
constexpr size_t kGraphsKept = 8;

int64_t aligned(int64_t bytes) {
  return (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

// cuBLASLt's workspace: what its heuristic may use for split-k and stream-k products (NVIDIA
// recommends 32 MiB on Hopper).
constexpr size_t kCublasLtWorkspaceBytes = size_t{32} << 20;

// One launch ready to go: its function, its sizes, and its arguments' values, which `params`
// points at (cuLaunchKernel reads each argument through a pointer); or, for a gemm that
// cuBLASLt runs, its plan.
struct ReadyLaunch {
  CUfunction function = nullptr;
  std::string name;
  std::array<unsigned, 3> grid = {1, 1, 1};
  std::array<unsigned, 3> block = {1, 1, 1};
  std::vector<uint64_t> values;  // a device address or an int64, bit for bit
  // Where each address among `values` points: value `value` is program buffer `buffer`'s
  // address plus `offset` (so that binding a caller's buffer re-points it).
  struct Address {
    size_t value, buffer;
    uint64_t offset;
  };
  std::vector<Address> addresses;
  std::vector<void*> params;
#ifdef KILN_HAVE_CUBLASLT_HEADERS
  std::unique_ptr<LtMatmul> matmul;
#endif
};

// A launch's sizes in the driver's range, or why not.
Status check_sizes(const CudaLaunch& launch) {
  constexpr int64_t kMaxGridX = std::numeric_limits<int32_t>::max();
  constexpr int64_t kMaxGridYZ = 65535;
  constexpr int64_t kMaxBlockThreads = 1024;
  const auto& g = launch.grid;
  const auto& b = launch.block;
  const bool grid_ok = g[0] >= 1 && g[0] <= kMaxGridX && g[1] >= 1 && g[1] <= kMaxGridYZ &&
                       g[2] >= 1 && g[2] <= kMaxGridYZ;
  const bool block_ok =
      b[0] >= 1 && b[1] >= 1 && b[2] >= 1 && b[0] * b[1] * b[2] <= kMaxBlockThreads;
  if (grid_ok && block_ok) return Status::ok();
  return Status::errorf(
      "launch of {} with grid {}x{}x{} and block {}x{}x{} is outside the GPU's "
      "limits",
      launch.function, g[0], g[1], g[2], b[0], b[1], b[2]);
}

}  // namespace

// An executor's own arena: its size, and its device memory once a run needed it.
struct OwnArena {
  const CudaDriver* driver = nullptr;
  int64_t bytes = 0;
  CUdeviceptr address = 0;

  OwnArena(const CudaDriver* owner, int64_t size) : driver(owner), bytes(size) {}
  ~OwnArena() {
    if (address != 0) driver->cuMemFree(address);
  }
  OwnArena(const OwnArena&) = delete;
  OwnArena& operator=(const OwnArena&) = delete;
};

struct CudaExecutor::Device {
  const CudaDriver* driver = nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  CUstream stream = nullptr;
  // Device memory, one allocation each: the constant segment, made with the executor; the
  // executor's own arena (shared with another executor by share_arena) and its own buffers for
  // the program's inputs and outputs, made when a run first needs them. A framework's run on
  // its own memory and its allocator's arena (run_on_stream) needs neither, so the GPU holds
  // the model's tensors once, where the framework counts them.
  std::shared_ptr<OwnArena> arena;
  CUdeviceptr constants = 0;
  CUdeviceptr io = 0;
  std::vector<CUdeviceptr> own_inputs, own_outputs;  // in `io`
  // Where the program reads its inputs, writes its outputs and keeps its intermediates: its
  // own buffers, or the caller's device memory that run_on_stream bound (bind).
  std::vector<CUdeviceptr> inputs, outputs;
  CUdeviceptr arena_base = 0;
  std::vector<CUdeviceptr> buffers;             // per program buffer: its device address
  std::vector<std::vector<ReadyLaunch>> steps;  // per program step; empty for a copy
  std::vector<CUevent> events;                  // the profile's: before the first step, after each
  CUevent caller_ready = nullptr, run_done = nullptr;  // run_on_stream's, made by its first run
  // The program captured as CUDA graphs, each holding the input and output addresses it was
  // captured with, the most recent last: a caller's allocator gives a few sets of addresses in
  // turn. `graph` is the one for the current addresses, or null.
  std::vector<std::pair<std::vector<CUdeviceptr>, CUgraphExec>> captured;
  CUgraphExec graph = nullptr;
  bool graphs = true;
  // What runs the gemms: cuBLASLt (its handle and workspace), or where it is absent or
  // declined, each gemm's template kernel.
  const CublasLt* lt = nullptr;
#ifdef KILN_HAVE_CUBLASLT_HEADERS
  cublasLtHandle_t lt_handle = nullptr;
#endif
  CUdeviceptr lt_workspace = 0;
  std::string gemm_library;
  std::string name;  // the GPU's
  int gemms = 0, template_gemms = 0;
  std::string template_reason;  // why the last gemm on its template kernel is there
  bool inputs_loaded = false;   // a run has copied inputs to the device

  ~Device() {
    if (driver == nullptr) return;
    if (context != nullptr) driver->cuCtxSetCurrent(context);
    steps.clear();  // the cuBLASLt plans, before their handle
#ifdef KILN_HAVE_CUBLASLT_HEADERS
    if (lt_handle != nullptr) lt->cublasLtDestroy(lt_handle);
#endif
    if (lt_workspace != 0) driver->cuMemFree(lt_workspace);
    for (const auto& [addresses, exec] : captured) driver->cuGraphExecDestroy(exec);
    for (CUevent event : events) driver->cuEventDestroy(event);
    for (CUevent event : {caller_ready, run_done}) {
      if (event != nullptr) driver->cuEventDestroy(event);
    }
    if (stream != nullptr) driver->cuStreamDestroy(stream);
    if (module != nullptr) driver->cuModuleUnload(module);
    if (constants != 0) driver->cuMemFree(constants);
    if (io != 0) driver->cuMemFree(io);
    if (context != nullptr) driver->cuDevicePrimaryCtxRelease(device);
  }

  // GPU `ordinal`'s primary context, current on this thread, a stream, and the cubin loaded.
  Status open(const std::string& cubin, int ordinal) {
    KILN_RETURN_IF_ERROR(driver->check(driver->cuDeviceGet(&device, ordinal),
                                       fmt::format("cuDeviceGet (GPU {})", ordinal)));
    std::array<char, 256> device_name{};
    if (driver->cuDeviceGetName(device_name.data(), device_name.size(), device) == CUDA_SUCCESS) {
      name = device_name.data();
    }
    KILN_RETURN_IF_ERROR(driver->check(driver->cuDevicePrimaryCtxRetain(&context, device),
                                       "retaining the GPU's primary context"));
    KILN_RETURN_IF_ERROR(driver->check(driver->cuCtxSetCurrent(context), "cuCtxSetCurrent"));
    KILN_RETURN_IF_ERROR(driver->check(driver->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING),
                                       "creating a stream"));
    const CUresult loaded = driver->cuModuleLoadData(&module, cubin.data());
    if (loaded == CUDA_ERROR_NO_BINARY_FOR_GPU || loaded == CUDA_ERROR_INVALID_IMAGE ||
        loaded == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) {
      int major = 0, minor = 0;
      driver->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
      driver->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
      return driver->check(
          loaded, fmt::format("this GPU (compute capability {}.{}) or its driver cannot run "
                              "Kiln's cubin",
                              major, minor));
    }
    return driver->check(loaded, "loading the cubin");
  }

  // cuBLASLt for the gemms, unless KILN_CUDA_GEMM=template asks for the template kernels or
  // the library is missing (`library` is the process's, or a test's; null when none).
  void open_gemm_library(Expected<const CublasLt*> library) {
    const char* choice = std::getenv("KILN_CUDA_GEMM");
    if (choice != nullptr && std::string_view(choice) == "template") {
      gemm_library = "template kernel (KILN_CUDA_GEMM=template)";
      return;
    }
    if (!library) {
      gemm_library = fmt::format("template kernel ({})", library.status().message());
      return;
    }
#ifdef KILN_HAVE_CUBLASLT_HEADERS
    const CublasLt& library_lt = **library;
    const Status created =
        library_lt.check(library_lt.cublasLtCreate(&lt_handle), "creating a cuBLASLt handle");
    if (!created) {
      lt_handle = nullptr;
      gemm_library = fmt::format("template kernel ({})", created.message());
      return;
    }
    if (driver->cuMemAlloc(&lt_workspace, kCublasLtWorkspaceBytes) != CUDA_SUCCESS) {
      lt_workspace = 0;
      gemm_library = "template kernel (no GPU memory for cuBLASLt's workspace)";
      return;
    }
    lt = &library_lt;
    gemm_library = cublaslt_version(library_lt);
#endif
  }

  static int64_t io_bytes(const Program& program) {
    int64_t bytes = 0;
    for (const int64_t input : program.input_bytes) bytes += aligned(input);
    for (const int64_t output : program.output_bytes) bytes += aligned(output);
    return bytes;
  }

  // What the program needs of the GPU with its own arena and buffers, for errors.
  static int64_t bytes_needed(const Program& program) {
    return aligned(program.arena_bytes) +
           aligned(static_cast<int64_t>(program.constants.size())) + io_bytes(program);
  }

  // The constants, uploaded now; the arena's size. Nothing is bound yet (every input, output
  // and arena address 0) until a run binds its memory.
  Status allocate(const Program& program) {
    arena = std::make_shared<OwnArena>(driver, program.arena_bytes);
    inputs.assign(program.input_bytes.size(), 0);
    outputs.assign(program.output_bytes.size(), 0);
    const int64_t constant_bytes = static_cast<int64_t>(program.constants.size());
    KILN_ASSIGN_OR_RETURN(constants, allocate_bytes(constant_bytes, "constant segment",
                                                    bytes_needed(program)));
    if (constant_bytes > 0) {
      KILN_RETURN_IF_ERROR(
          driver->check(driver->cuMemcpyHtoDAsync(constants, program.constants.data(),
                                                  static_cast<size_t>(constant_bytes), stream),
                        "uploading the constants"));
    }
    return driver->check(driver->cuStreamSynchronize(stream), "uploading the constants");
  }

  // The executor's own buffers for the program's inputs and outputs, made on first use.
  Status own_io(const Program& program) {
    if (io != 0 || (program.input_bytes.empty() && program.output_bytes.empty())) {
      return Status::ok();
    }
    KILN_ASSIGN_OR_RETURN(io, allocate_bytes(io_bytes(program), "inputs and outputs",
                                             bytes_needed(program)));
    CUdeviceptr next = io;
    for (const int64_t bytes : program.input_bytes) {
      own_inputs.push_back(next);
      next += static_cast<CUdeviceptr>(aligned(bytes));
    }
    for (const int64_t bytes : program.output_bytes) {
      own_outputs.push_back(next);
      next += static_cast<CUdeviceptr>(aligned(bytes));
    }
    return Status::ok();
  }

  // The executor's own arena (shared, it may be another executor's too), made on first use.
  Expected<CUdeviceptr> own_arena(const Program& program) {
    if (arena->address == 0) {
      KILN_ASSIGN_OR_RETURN(arena->address,
                            allocate_bytes(arena->bytes, "arena", bytes_needed(program)));
    }
    return arena->address;
  }

  // `bytes` of device memory, or an error saying what the program needs and what is free.
  Expected<CUdeviceptr> allocate_bytes(int64_t bytes, std::string_view what, int64_t needed) {
    CUdeviceptr address = 0;
    const CUresult result =
        driver->cuMemAlloc(&address, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
    if (result == CUDA_ERROR_OUT_OF_MEMORY) {
      size_t free = 0, total = 0;
      driver->cuMemGetInfo(&free, &total);
      return Status::errorf(
          "out of GPU memory allocating the {} ({}): the program needs {} of "
          "device memory, the GPU has {} free of {}",
          what, format_bytes(bytes), format_bytes(needed), format_bytes(static_cast<int64_t>(free)),
          format_bytes(static_cast<int64_t>(total)));
    }
    KILN_RETURN_IF_ERROR(driver->check(result, fmt::format("allocating the {}", what)));
    return address;
  }

  // Every buffer's device address, and every step's launches ready to go.
  Status resolve(const Program& program, const CudaKernelLaunches& launches) {
    buffers.clear();
    gemms = template_gemms = 0;
    for (const BufferSlot& slot : program.buffers) {
      const auto offset = static_cast<CUdeviceptr>(slot.offset);
      switch (slot.storage) {
        case Storage::input:
          buffers.push_back(inputs[static_cast<size_t>(slot.index)]);
          break;
        case Storage::output:
          buffers.push_back(outputs[static_cast<size_t>(slot.index)]);
          break;
        case Storage::constant:
          buffers.push_back(constants + offset);
          break;
        case Storage::arena:
          buffers.push_back(arena_base + offset);
          break;
        case Storage::state:
          // Only the CPU's kernels keep state (packed weights: compiler/stages.h).
          return Status::error("a GPU program has no kernel state");
      }
    }
    steps.clear();
    steps.resize(program.steps.size());
    for (size_t s = 0; s < program.steps.size(); ++s) {
      const Step& step = program.steps[s];
      if (step.kind != Step::Kind::kernel) continue;
      for (const CudaLaunch& launch : launches[static_cast<size_t>(step.kernel)]) {
        KILN_ASSIGN_OR_RETURN(ReadyLaunch ready, prepare(step, launch));
        steps[s].push_back(std::move(ready));
      }
    }
    return invalidate_graph();
  }

  Expected<ReadyLaunch> prepare(const Step& step, const CudaLaunch& launch) {
    KILN_RETURN_IF_ERROR(check_sizes(launch).with_context(step.label));
    ReadyLaunch ready;
    ready.name = launch.function;
    KILN_RETURN_IF_ERROR(
        driver->check(driver->cuModuleGetFunction(&ready.function, module, launch.function.c_str()),
                      fmt::format("{}: finding {} in the cubin", step.label, launch.function)));
    for (int d = 0; d < 3; ++d) {
      ready.grid[d] = static_cast<unsigned>(launch.grid[d]);
      ready.block[d] = static_cast<unsigned>(launch.block[d]);
    }
    for (const CudaLaunchArg& arg : launch.args) {
      if (arg.kind == CudaLaunchArg::Kind::i64) {
        ready.values.push_back(static_cast<uint64_t>(arg.value));
        continue;
      }
      if (arg.param < 0 || static_cast<size_t>(arg.param) >= step.buffers.size()) {
        return Status::errorf("{}: {} takes parameter {} of a kernel with {}", step.label,
                              launch.function, arg.param, step.buffers.size());
      }
      const auto buffer = static_cast<size_t>(step.buffers[static_cast<size_t>(arg.param)]);
      ready.addresses.push_back(
          {ready.values.size(), buffer, static_cast<uint64_t>(arg.byte_offset)});
      ready.values.push_back(buffers[buffer] + static_cast<CUdeviceptr>(arg.byte_offset));
    }
    // `values` is complete: its elements stay where they are from here on.
    for (uint64_t& value : ready.values) ready.params.push_back(&value);
    if (launch.gemm) plan_gemm(*launch.gemm, ready);
    return ready;
  }

  // A gemm through cuBLASLt when it is there and has an algorithm for it, else its template
  // kernel, which computes the same product (a product over k = 0 is left to it too).
  void plan_gemm([[maybe_unused]] const CudaGemm& gemm, [[maybe_unused]] ReadyLaunch& ready) {
    ++gemms;
#ifdef KILN_HAVE_CUBLASLT_HEADERS
    if (lt != nullptr && gemm.k == 0) template_reason = "a product over k = 0";
    if (lt != nullptr && gemm.k >= 1 && ready.values.size() >= 3) {
      Expected<std::unique_ptr<LtMatmul>> planned =
          LtMatmul::plan(*lt, lt_handle, gemm, ready.values[0], ready.values[1], ready.values[2],
                         kCublasLtWorkspaceBytes);
      if (planned) {
        ready.matmul = std::move(planned).value();
        return;
      }
      template_reason = planned.status().message();
    }
#endif
    ++template_gemms;
  }

  // Every captured graph destroyed, as the launches they hold changed.
  Status invalidate_graph() {
    CUresult destroyed = CUDA_SUCCESS;
    for (const auto& [addresses, exec] : captured) {
      const CUresult result = driver->cuGraphExecDestroy(exec);
      if (destroyed == CUDA_SUCCESS) destroyed = result;
    }
    captured.clear();
    graph = nullptr;
    return driver->check(destroyed, "destroying the CUDA graph");
  }

  // The addresses a captured graph holds: the inputs', the outputs' and the arena's.
  std::vector<CUdeviceptr> bound_addresses() const {
    std::vector<CUdeviceptr> addresses = inputs;
    addresses.insert(addresses.end(), outputs.begin(), outputs.end());
    addresses.push_back(arena_base);
    return addresses;
  }

  // The program's inputs at `in`, outputs at `out` and arena at `arena_at`: every buffer and
  // launch argument that addresses one re-pointed (the launches' other arguments, and
  // cuBLASLt's algorithms, stay as prepared), and the graph captured with these addresses, if
  // any, made current.
  void bind(const Program& program, std::span<const CUdeviceptr> in,
            std::span<const CUdeviceptr> out, CUdeviceptr arena_at) {
    if (std::ranges::equal(in, inputs) && std::ranges::equal(out, outputs) &&
        arena_at == arena_base) {
      return;
    }
    inputs.assign(in.begin(), in.end());
    outputs.assign(out.begin(), out.end());
    arena_base = arena_at;
    for (size_t b = 0; b < program.buffers.size(); ++b) {
      const BufferSlot& slot = program.buffers[b];
      const auto index = static_cast<size_t>(slot.index);
      if (slot.storage == Storage::input) buffers[b] = inputs[index];
      if (slot.storage == Storage::output) buffers[b] = outputs[index];
      if (slot.storage == Storage::arena) buffers[b] = arena_base + slot.offset;
    }
    for (std::vector<ReadyLaunch>& step : steps) {
      for (ReadyLaunch& launch : step) {
        for (const ReadyLaunch::Address& address : launch.addresses) {
          launch.values[address.value] = buffers[address.buffer] + address.offset;
        }
#ifdef KILN_HAVE_CUBLASLT_HEADERS
        if (launch.matmul != nullptr) {
          launch.matmul->rebind(launch.values[0], launch.values[1], launch.values[2]);
        }
#endif
      }
    }
    const std::vector<CUdeviceptr> current = bound_addresses();
    const auto found = std::ranges::find(captured, current, &decltype(captured)::value_type::first);
    graph = found == captured.end() ? nullptr : found->second;
  }

  // Step `s` issued on the stream.
  Status launch_step(const Program& program, size_t s) {
    const Step& step = program.steps[s];
    if (step.kind == Step::Kind::copy) {
      const CUdeviceptr from = buffers[static_cast<size_t>(step.buffers[0])];
      const CUdeviceptr to = buffers[static_cast<size_t>(step.buffers[1])];
      if (from == to) return Status::ok();
      const auto bytes =
          static_cast<size_t>(program.buffers[static_cast<size_t>(step.buffers[1])].bytes);
      return driver->check(driver->cuMemcpyDtoDAsync(to, from, bytes, stream), step.label);
    }
    for (ReadyLaunch& launch : steps[s]) {
#ifdef KILN_HAVE_CUBLASLT_HEADERS
      if (launch.matmul != nullptr) {
        KILN_RETURN_IF_ERROR(launch.matmul->run(lt_workspace, stream)
                                 .with_context(fmt::format("kernel {}", step.label)));
        continue;
      }
#endif
      KILN_RETURN_IF_ERROR(driver->check(
          driver->cuLaunchKernel(launch.function, launch.grid[0], launch.grid[1], launch.grid[2],
                                 launch.block[0], launch.block[1], launch.block[2], 0, stream,
                                 launch.params.data(), nullptr),
          fmt::format("launching {} of kernel {}", launch.name, step.label)));
    }
    return Status::ok();
  }

  Status launch_all(const Program& program) {
    for (size_t s = 0; s < program.steps.size(); ++s) {
      KILN_RETURN_IF_ERROR(launch_step(program, s));
    }
    return Status::ok();
  }

  // Every step captured into a CUDA graph, once for each set of input and output addresses (a
  // few kept); then the graph launched.
  Status launch_graph(const Program& program) {
    if (graph == nullptr) {
      if (captured.size() == kGraphsKept) {
        driver->cuGraphExecDestroy(captured.front().second);
        captured.erase(captured.begin());
      }
      KILN_RETURN_IF_ERROR(
          driver->check(driver->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                        "capturing the program as a CUDA graph"));
      const Status launched = launch_all(program);
      CUgraph capture = nullptr;
      const CUresult ended = driver->cuStreamEndCapture(stream, &capture);
      KILN_RETURN_IF_ERROR(launched);
      KILN_RETURN_IF_ERROR(driver->check(ended, "capturing the program as a CUDA graph"));
      const CUresult made = driver->cuGraphInstantiate(&graph, capture, 0);
      driver->cuGraphDestroy(capture);
      KILN_RETURN_IF_ERROR(driver->check(made, "instantiating the program's CUDA graph"));
      captured.emplace_back(bound_addresses(), graph);
    }
    return driver->check(driver->cuGraphLaunch(graph, stream), "launching the CUDA graph");
  }

  // The steps, each between two events, and their times added to `profile`.
  Status launch_profiled(const Program& program, Profile& profile) {
    while (events.size() < program.steps.size() + 1) {
      CUevent event = nullptr;
      KILN_RETURN_IF_ERROR(
          driver->check(driver->cuEventCreate(&event, CU_EVENT_DEFAULT), "creating an event"));
      events.push_back(event);
    }
    KILN_RETURN_IF_ERROR(driver->check(driver->cuEventRecord(events[0], stream), "cuEventRecord"));
    for (size_t s = 0; s < program.steps.size(); ++s) {
      KILN_RETURN_IF_ERROR(launch_step(program, s));
      KILN_RETURN_IF_ERROR(
          driver->check(driver->cuEventRecord(events[s + 1], stream), "cuEventRecord"));
    }
    KILN_RETURN_IF_ERROR(synchronise());
    for (size_t s = 0; s < program.steps.size(); ++s) {
      float milliseconds = 0;
      KILN_RETURN_IF_ERROR(driver->check(
          driver->cuEventElapsedTime(&milliseconds, events[s], events[s + 1]), "timing a step"));
      profile.step_seconds[s] += milliseconds * 1e-3;
    }
    return Status::ok();
  }

  // Step by step, the hook given each step's buffers copied to the host.
  Status launch_checked(const Program& program,
                        const std::function<Status(int, std::span<void* const>)>& after_step) {
    std::vector<std::vector<std::byte>> host;
    std::vector<void*> pointers;
    for (size_t s = 0; s < program.steps.size(); ++s) {
      KILN_RETURN_IF_ERROR(launch_step(program, s));
      KILN_RETURN_IF_ERROR(synchronise().with_context(program.steps[s].label));
      const std::vector<int>& step_buffers = program.steps[s].buffers;
      host.assign(step_buffers.size(), {});
      pointers.clear();
      for (size_t b = 0; b < step_buffers.size(); ++b) {
        const auto buffer = static_cast<size_t>(step_buffers[b]);
        host[b].resize(static_cast<size_t>(program.buffers[buffer].bytes));
        KILN_RETURN_IF_ERROR(driver->check(
            driver->cuMemcpyDtoHAsync(host[b].data(), buffers[buffer], host[b].size(), stream),
            "copying a step's buffers to the host"));
        pointers.push_back(host[b].data());
      }
      KILN_RETURN_IF_ERROR(synchronise());
      KILN_RETURN_IF_ERROR(after_step(static_cast<int>(s), pointers));
    }
    return Status::ok();
  }

  // Ready for a run: the context current on this thread.
  Status make_current() {
    return driver->check(driver->cuCtxSetCurrent(context), "cuCtxSetCurrent");
  }

  // Waits for the stream; an error of a kernel that ran since the last wait shows here.
  Status synchronise() {
    return driver->check(driver->cuStreamSynchronize(stream),
                         "running the program on the GPU (a kernel since the last "
                         "synchronisation failed; --check runs and checks step by step)");
  }
};

Expected<CudaDeviceInfo> cuda_device_info(int ordinal) {
  KILN_ASSIGN_OR_RETURN(const CudaDriver* driver, load_cuda_driver());
  CudaDeviceInfo info;
  CUdevice device = 0;
  KILN_RETURN_IF_ERROR(driver->check(driver->cuDeviceGet(&device, ordinal),
                                     fmt::format("cuDeviceGet (GPU {})", ordinal)));
  char name[256] = {};
  KILN_RETURN_IF_ERROR(
      driver->check(driver->cuDeviceGetName(name, sizeof(name), device), "cuDeviceGetName"));
  info.name = name;
  int major = 0, minor = 0;
  KILN_RETURN_IF_ERROR(driver->check(
      driver->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
      "cuDeviceGetAttribute"));
  KILN_RETURN_IF_ERROR(driver->check(
      driver->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
      "cuDeviceGetAttribute"));
  info.compute_capability = 10 * major + minor;
  KILN_RETURN_IF_ERROR(
      driver->check(driver->cuDriverGetVersion(&info.driver_version), "cuDriverGetVersion"));
  CUcontext context = nullptr;
  KILN_RETURN_IF_ERROR(driver->check(driver->cuDevicePrimaryCtxRetain(&context, device),
                                     "retaining the GPU's primary context"));
  driver->cuCtxSetCurrent(context);
  size_t free = 0, total = 0;
  const Status memory = driver->check(driver->cuMemGetInfo(&free, &total), "cuMemGetInfo");
  driver->cuDevicePrimaryCtxRelease(device);
  KILN_RETURN_IF_ERROR(memory);
  info.free_bytes = static_cast<int64_t>(free);
  info.total_bytes = static_cast<int64_t>(total);
  return info;
}

Expected<std::unique_ptr<CudaExecutor>> CudaExecutor::create(std::shared_ptr<const Program> program,
                                                             std::string cubin,
                                                             CudaKernelLaunches launches,
                                                             int ordinal, const CudaDriver* driver,
                                                             const CublasLt* lt) {
  KILN_RETURN_IF_ERROR(check_program(*program, launches.size()));
  KILN_RETURN_IF_ERROR(refuse_collectives(*program, "collectives on the GPU need NCCL (not yet)"));
  Expected<const CublasLt*> library = lt;
  if (driver == nullptr) {
    KILN_ASSIGN_OR_RETURN(driver, load_cuda_driver());
    library = load_cublaslt();
  } else if (lt == nullptr) {
    library = Status::error("no cuBLASLt given with a test's driver");
  }
  auto device = std::make_unique<Device>();
  device->driver = driver;
  KILN_RETURN_IF_ERROR(device->open(cubin, ordinal));
  device->open_gemm_library(library);
  KILN_RETURN_IF_ERROR(device->allocate(*program));
  KILN_RETURN_IF_ERROR(device->resolve(*program, launches));
  return std::unique_ptr<CudaExecutor>(
      new CudaExecutor(std::move(program), std::move(launches), std::move(device)));
}

CudaExecutor::CudaExecutor(std::shared_ptr<const Program> program, CudaKernelLaunches launches,
                           std::unique_ptr<Device> device)
    : program_(std::move(program)), launches_(std::move(launches)), device_(std::move(device)) {}

CudaExecutor::~CudaExecutor() = default;

void CudaExecutor::use_graphs(bool on) { device_->graphs = on; }

std::string CudaExecutor::description() const {
  return fmt::format("{}, gemms through {}", device_->name.empty() ? "a GPU" : device_->name,
                     gemm_library());
}

std::string CudaExecutor::gemm_library() const {
  const Device& device = *device_;
  if (device.lt == nullptr || device.template_gemms == 0) return device.gemm_library;
  return fmt::format("{} ({} of {} on the template kernel: {})", device.gemm_library,
                     device.template_gemms, device.gemms, device.template_reason);
}

void CudaExecutor::share_arena(ProgramExecutor& other_executor) {
  auto* other = dynamic_cast<CudaExecutor*>(&other_executor);
  if (other == nullptr || other->device_->driver != device_->driver) return;
  Device& mine = *device_;
  Device& theirs = *other->device_;
  // The larger one serves both; each run binds the arena it runs on, so the launches follow.
  if (mine.arena->bytes >= theirs.arena->bytes) {
    theirs.arena = mine.arena;
  } else {
    mine.arena = theirs.arena;
  }
}

Status CudaExecutor::run(std::span<const void* const> inputs, std::span<void* const> outputs,
                         const RunHooks& hooks) {
  const Program& program = *program_;
  KILN_RETURN_IF_ERROR(check_run_arguments(program, inputs.size(), outputs.size()));
  Device& device = *device_;
  KILN_RETURN_IF_ERROR(device.make_current());
  const CudaDriver& driver = *device.driver;
  // Host memory crosses into and out of the executor's own buffers.
  KILN_RETURN_IF_ERROR(device.own_io(program));
  KILN_ASSIGN_OR_RETURN(const CUdeviceptr arena, device.own_arena(program));
  device.bind(program, device.own_inputs, device.own_outputs, arena);
  const bool copy_inputs = !hooks.io_on_device || !device.inputs_loaded;
  for (size_t i = 0; copy_inputs && i < inputs.size(); ++i) {
    KILN_RETURN_IF_ERROR(driver.check(
        driver.cuMemcpyHtoDAsync(device.inputs[i], inputs[i],
                                 static_cast<size_t>(program.input_bytes[i]), device.stream),
        fmt::format("copying input {} to the GPU", i)));
  }
  device.inputs_loaded = true;
  if (hooks.profile != nullptr) {
    hooks.profile->step_seconds.resize(program.steps.size(), 0.0);
    ++hooks.profile->runs;
  }
  if (hooks.after_step) {
    KILN_RETURN_IF_ERROR(device.launch_checked(program, hooks.after_step));
  } else if (hooks.profile != nullptr) {
    KILN_RETURN_IF_ERROR(device.launch_profiled(program, *hooks.profile));
  } else if (device.graphs) {
    KILN_RETURN_IF_ERROR(device.launch_graph(program));
  } else {
    KILN_RETURN_IF_ERROR(device.launch_all(program));
  }
  for (size_t o = 0; !hooks.io_on_device && o < outputs.size(); ++o) {
    KILN_RETURN_IF_ERROR(driver.check(
        driver.cuMemcpyDtoHAsync(outputs[o], device.outputs[o],
                                 static_cast<size_t>(program.output_bytes[o]), device.stream),
        fmt::format("copying output {} from the GPU", o)));
  }
  return device.synchronise();
}

Status CudaExecutor::run_on_stream(std::span<const uint64_t> inputs,
                                   std::span<const uint64_t> outputs, void* caller_stream,
                                   uint64_t arena) {
  const Program& program = *program_;
  KILN_RETURN_IF_ERROR(check_run_arguments(program, inputs.size(), outputs.size()));
  if (arena % kDeviceAlignment != 0) {
    return Status::errorf("the arena given at {:#x} is not {}-byte aligned", arena,
                          kDeviceAlignment);
  }
  Device& device = *device_;
  KILN_RETURN_IF_ERROR(device.make_current());
  if (arena == 0) {
    KILN_ASSIGN_OR_RETURN(arena, device.own_arena(program));
  }
  const CudaDriver& driver = *device.driver;
  for (CUevent* event : {&device.caller_ready, &device.run_done}) {
    if (*event == nullptr) {
      KILN_RETURN_IF_ERROR(
          driver.check(driver.cuEventCreate(event, CU_EVENT_DISABLE_TIMING), "creating an event"));
    }
  }
  const auto theirs = static_cast<CUstream>(caller_stream);
  KILN_RETURN_IF_ERROR(driver.check(driver.cuEventRecord(device.caller_ready, theirs),
                                    "recording the caller's stream"));
  KILN_RETURN_IF_ERROR(driver.check(driver.cuStreamWaitEvent(device.stream, device.caller_ready, 0),
                                    "waiting for the caller's stream"));
  // The kernels read and write the caller's memory where it lies, at the alignment the
  // program's own buffers have (which cuBLASLt's algorithms and vector accesses were chosen
  // for); a tensor elsewhere (a view into a larger one) is copied through the own buffer.
  const auto in_place = [](uint64_t address) { return address % kDeviceAlignment == 0; };
  std::vector<CUdeviceptr> in(inputs.begin(), inputs.end()), out(outputs.begin(), outputs.end());
  if (!std::ranges::all_of(in, in_place) || !std::ranges::all_of(out, in_place)) {
    KILN_RETURN_IF_ERROR(device.own_io(program));
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in_place(in[i])) in[i] = device.own_inputs[i];
    }
    for (size_t o = 0; o < out.size(); ++o) {
      if (!in_place(out[o])) out[o] = device.own_outputs[o];
    }
  }
  device.bind(program, in, out, arena);
  device.inputs_loaded = false;  // the own buffers are not all the caller's inputs
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (in[i] == inputs[i]) continue;
    KILN_RETURN_IF_ERROR(driver.check(
        driver.cuMemcpyDtoDAsync(in[i], inputs[i], static_cast<size_t>(program.input_bytes[i]),
                                 device.stream),
        fmt::format("copying input {} on the GPU (its address is not {}-byte aligned)", i,
                    kDeviceAlignment)));
  }
  KILN_RETURN_IF_ERROR(device.graphs ? device.launch_graph(program) : device.launch_all(program));
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (out[o] == outputs[o]) continue;
    KILN_RETURN_IF_ERROR(driver.check(
        driver.cuMemcpyDtoDAsync(outputs[o], out[o], static_cast<size_t>(program.output_bytes[o]),
                                 device.stream),
        fmt::format("copying output {} on the GPU (its address is not {}-byte aligned)", o,
                    kDeviceAlignment)));
  }
  KILN_RETURN_IF_ERROR(
      driver.check(driver.cuEventRecord(device.run_done, device.stream), "recording the run"));
  return driver.check(driver.cuStreamWaitEvent(theirs, device.run_done, 0),
                      "ordering the caller's stream after the run");
}

#else

struct CudaExecutor::Device {};

Expected<CudaDeviceInfo> cuda_device_info(int) { return load_cuda_driver().status(); }

Expected<std::unique_ptr<CudaExecutor>> CudaExecutor::create(std::shared_ptr<const Program>,
                                                             std::string, CudaKernelLaunches, int,
                                                             const CudaDriver*, const CublasLt*) {
  return load_cuda_driver().status();
}

CudaExecutor::~CudaExecutor() = default;
void CudaExecutor::use_graphs(bool) {}
std::string CudaExecutor::gemm_library() const { return ""; }
std::string CudaExecutor::description() const { return ""; }
void CudaExecutor::share_arena(ProgramExecutor&) {}
Status CudaExecutor::run(std::span<const void* const>, std::span<void* const>, const RunHooks&) {
  return load_cuda_driver().status();
}
Status CudaExecutor::run_on_stream(std::span<const uint64_t>, std::span<const uint64_t>, void*,
                                   uint64_t) {
  return load_cuda_driver().status();
}

#endif

}  // namespace kiln::runtime
