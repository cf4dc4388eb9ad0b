// The GPU executor (runtime/cuda_executor.h) without a GPU: on a stand-in driver whose device
// memory is this process's, whose "kernels" are host functions named like the launches', and
// whose streams run each call at once (or record it while a graph is captured). It checks what
// the executor asks of the driver: buffers resolved to device addresses plus offsets, the
// constants uploaded, inputs and outputs copied at the program's edge, copy steps, graph capture
// and replay, events per step, the check mode's host copies, shared arenas, and the errors
// (out of memory, a failing launch). Without the driver, the real loader says why.
#include "runtime/cuda_executor.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/cublaslt.h"
#include "runtime/cuda_driver.h"

namespace kiln::runtime {
namespace {

TEST(CudaDriver, WithoutAGpuTheLoaderSaysWhy) {
  Expected<const CudaDriver*> driver = load_cuda_driver();
  if (driver) GTEST_SKIP() << "this machine has an NVIDIA driver and a GPU";
  const std::string& message = driver.status().message();
  EXPECT_TRUE(message.find("no NVIDIA driver") != std::string::npos ||
              message.find("no CUDA device") != std::string::npos ||
              message.find("without the CUDA toolkit") != std::string::npos)
      << message;
  Expected<CudaDeviceInfo> info = cuda_device_info(0);
  ASSERT_FALSE(info);
  EXPECT_EQ(info.status().message(), message) << "the same reason on every call";
}

#ifdef KILN_HAVE_CUDA_HEADERS

// --- The stand-in driver ----------------------------------------------------------------------

// A stand-in kernel: its arguments, and the grid's z (a gemm's batch).
using HostKernel = void (*)(const std::vector<uint64_t>& args, unsigned grid_z);

struct RecordedLaunch {
  std::string function;
  std::vector<uint64_t> args;
  unsigned grid_z = 1;
};

struct HostFunction {
  HostKernel run;
  size_t arguments;  // each 8 bytes: an address or an int64
};

struct Fake {
  std::map<std::string, HostFunction> kernels;
  std::deque<std::string> functions;  // a CUfunction points at its name here
  size_t free_bytes = 1 << 20;
  bool capturing = false;
  std::vector<RecordedLaunch> captured;
  std::deque<std::vector<RecordedLaunch>> graphs;
  int launches = 0;  // kernels run
  int graph_launches = 0;
  int uploads = 0;    // host-to-device copies
  int downloads = 0;  // device-to-host copies
  std::vector<CUstream> waiting_streams;  // each cuStreamWaitEvent's stream, in order
};
Fake* fake = nullptr;

template <typename T>
T* as_pointer(CUdeviceptr address) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(address));
}

// A kernel, or a device-to-device copy ("memcpy" of {to, from, bytes}), which a stream also
// captures into a graph.
void run_launch(const RecordedLaunch& launch) {
  if (launch.function == "memcpy") {
    std::memcpy(as_pointer<void>(launch.args[0]), as_pointer<void>(launch.args[1]), launch.args[2]);
    return;
  }
  ++fake->launches;
  fake->kernels.at(launch.function).run(launch.args, launch.grid_z);
}

void run_or_capture(RecordedLaunch launch) {
  if (fake->capturing) {
    fake->captured.push_back(std::move(launch));  // a graph keeps the arguments' values
  } else {
    run_launch(launch);
  }
}

CUresult fake_alloc(CUdeviceptr* address, size_t bytes) {
  if (bytes > fake->free_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  fake->free_bytes -= bytes;
  *address = reinterpret_cast<uintptr_t>(std::calloc(bytes, 1));
  return CUDA_SUCCESS;
}
CUresult fake_free(CUdeviceptr address) {
  std::free(as_pointer<void>(address));
  return CUDA_SUCCESS;
}
CUresult fake_mem_info(size_t* free, size_t* total) {
  *free = fake->free_bytes;
  *total = 1 << 20;
  return CUDA_SUCCESS;
}
CUresult fake_htod(CUdeviceptr to, const void* from, size_t bytes, CUstream) {
  ++fake->uploads;
  std::memcpy(as_pointer<void>(to), from, bytes);
  return CUDA_SUCCESS;
}
CUresult fake_dtoh(void* to, CUdeviceptr from, size_t bytes, CUstream) {
  ++fake->downloads;
  std::memcpy(to, as_pointer<void>(from), bytes);
  return CUDA_SUCCESS;
}
CUresult fake_dtod(CUdeviceptr to, CUdeviceptr from, size_t bytes, CUstream) {
  run_or_capture({"memcpy", {to, from, bytes}});
  return CUDA_SUCCESS;
}
CUresult fake_get_function(CUfunction* function, CUmodule, const char* name) {
  if (fake->kernels.count(name) == 0) return CUDA_ERROR_NOT_FOUND;
  fake->functions.emplace_back(name);
  *function = reinterpret_cast<CUfunction>(&fake->functions.back());
  return CUDA_SUCCESS;
}
CUresult fake_launch(CUfunction function, unsigned, unsigned, unsigned grid_z, unsigned, unsigned,
                     unsigned, unsigned, CUstream, void** params, void**) {
  RecordedLaunch launch{*reinterpret_cast<std::string*>(function), {}, grid_z};
  if (launch.function == "fails") return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  for (size_t a = 0; a < fake->kernels.at(launch.function).arguments; ++a) {
    launch.args.push_back(*static_cast<uint64_t*>(params[a]));
  }
  run_or_capture(std::move(launch));
  return CUDA_SUCCESS;
}
CUresult fake_begin_capture(CUstream, CUstreamCaptureMode) {
  fake->capturing = true;
  fake->captured.clear();
  return CUDA_SUCCESS;
}
CUresult fake_end_capture(CUstream, CUgraph* graph) {
  fake->capturing = false;
  fake->graphs.push_back(fake->captured);
  *graph = reinterpret_cast<CUgraph>(&fake->graphs.back());
  return CUDA_SUCCESS;
}
CUresult fake_instantiate(CUgraphExec* exec, CUgraph graph, unsigned long long) {
  *exec = reinterpret_cast<CUgraphExec>(graph);
  return CUDA_SUCCESS;
}
CUresult fake_graph_launch(CUgraphExec exec, CUstream) {
  ++fake->graph_launches;
  for (const RecordedLaunch& launch : *reinterpret_cast<std::vector<RecordedLaunch>*>(exec)) {
    run_launch(launch);
  }
  return CUDA_SUCCESS;
}
CUresult fake_elapsed(float* milliseconds, CUevent, CUevent) {
  *milliseconds = 1.0f;
  return CUDA_SUCCESS;
}
CUresult fake_error_name(CUresult result, const char** name) {
  *name = result == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY"
                                             : "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
  return CUDA_SUCCESS;
}
CUresult fake_error_string(CUresult, const char** description) {
  *description = "as the stand-in says";
  return CUDA_SUCCESS;
}
template <typename... Args>
CUresult succeed(Args...) {
  return CUDA_SUCCESS;
}
CUresult fake_retain(CUcontext* context, CUdevice) {
  static int primary = 0;
  *context = reinterpret_cast<CUcontext>(&primary);
  return CUDA_SUCCESS;
}
CUresult fake_create_event(CUevent* event, unsigned) {
  static int events = 0;
  *event = reinterpret_cast<CUevent>(&events);
  return CUDA_SUCCESS;
}

int executor_stream = 0;  // the executor's stream points here
CUresult fake_create_stream(CUstream* stream, unsigned) {
  *stream = reinterpret_cast<CUstream>(&executor_stream);
  return CUDA_SUCCESS;
}
CUresult fake_wait_event(CUstream stream, CUevent, unsigned) {
  fake->waiting_streams.push_back(stream);
  return CUDA_SUCCESS;
}

CUresult fake_device_name(char* name, int length, CUdevice) {
  std::snprintf(name, static_cast<size_t>(length), "Stand-in GPU");
  return CUDA_SUCCESS;
}

CudaDriver stand_in_driver() {
  CudaDriver driver;
  driver.cuDeviceGet = succeed<CUdevice*, int>;
  driver.cuDeviceGetName = fake_device_name;
  driver.cuDeviceGetAttribute = succeed<int*, CUdevice_attribute, CUdevice>;
  driver.cuDevicePrimaryCtxRetain = fake_retain;
  driver.cuDevicePrimaryCtxRelease = succeed<CUdevice>;
  driver.cuCtxSetCurrent = succeed<CUcontext>;
  driver.cuStreamCreate = fake_create_stream;
  driver.cuStreamWaitEvent = fake_wait_event;
  driver.cuStreamDestroy = succeed<CUstream>;
  driver.cuStreamSynchronize = succeed<CUstream>;
  driver.cuModuleLoadData = succeed<CUmodule*, const void*>;
  driver.cuModuleUnload = succeed<CUmodule>;
  driver.cuModuleGetFunction = fake_get_function;
  driver.cuMemAlloc = fake_alloc;
  driver.cuMemFree = fake_free;
  driver.cuMemGetInfo = fake_mem_info;
  driver.cuMemcpyHtoDAsync = fake_htod;
  driver.cuMemcpyDtoHAsync = fake_dtoh;
  driver.cuMemcpyDtoDAsync = fake_dtod;
  driver.cuLaunchKernel = fake_launch;
  driver.cuEventCreate = fake_create_event;
  driver.cuEventRecord = succeed<CUevent, CUstream>;
  driver.cuEventElapsedTime = fake_elapsed;
  driver.cuEventDestroy = succeed<CUevent>;
  driver.cuStreamBeginCapture = fake_begin_capture;
  driver.cuStreamEndCapture = fake_end_capture;
  driver.cuGraphInstantiate = fake_instantiate;
  driver.cuGraphLaunch = fake_graph_launch;
  driver.cuGraphExecDestroy = succeed<CUgraphExec>;
  driver.cuGraphDestroy = succeed<CUgraph>;
  driver.cuGetErrorName = fake_error_name;
  driver.cuGetErrorString = fake_error_string;
  return driver;
}

// The stand-in kernels: out[i] = in[i] + 1 and out[i] = in[i] * scale[0], over n floats.
void add_one(const std::vector<uint64_t>& args, unsigned) {
  const float* in = as_pointer<float>(args[0]);
  float* out = as_pointer<float>(args[1]);
  for (uint64_t i = 0; i < args[2]; ++i) out[i] = in[i] + 1;
}
void scale(const std::vector<uint64_t>& args, unsigned) {
  const float* in = as_pointer<float>(args[0]);
  const float* factor = as_pointer<float>(args[1]);
  float* out = as_pointer<float>(args[2]);
  for (uint64_t i = 0; i < args[3]; ++i) out[i] = in[i] * factor[0];
}

constexpr int64_t kElements = 16;
constexpr int64_t kBytes = kElements * 4;

// y = (x + 1) * 2 into output 0, and x + 1 copied into output 1; the 2 is a constant, the
// x + 1 lives in the arena, 64 bytes in (so a wrong offset shows).
std::shared_ptr<const Program> two_kernel_program() {
  auto program = std::make_shared<Program>();
  program->input_bytes = {kBytes};
  program->output_bytes = {kBytes, kBytes};
  program->arena_bytes = 2 * kBytes;
  program->num_kernels = 2;
  const float two = 2.0f;
  program->constants.resize(64 + sizeof(two));
  std::memcpy(program->constants.data() + 64, &two, sizeof(two));
  program->buffers = {{Storage::input, 0, 0, kBytes},
                      {Storage::arena, 0, kBytes, kBytes},
                      {Storage::constant, 0, 64, 4},
                      {Storage::output, 0, 0, kBytes},
                      {Storage::output, 1, 0, kBytes}};
  program->steps = {{Step::Kind::kernel, 0, {0, 1}, "add_one #1"},
                    {Step::Kind::kernel, 1, {1, 2, 3}, "mul #2"},
                    {Step::Kind::copy, 0, {1, 4}, "copy to output 1"}};
  return program;
}

CudaKernelLaunches two_kernel_launches(const std::string& second = "scale") {
  using Arg = CudaLaunchArg;
  const Arg n{Arg::Kind::i64, 0, 0, kElements};
  return {{{"add_one",
            {1, 1, 1},
            {32, 1, 1},
            {{Arg::Kind::buffer, 0, 0, 0}, {Arg::Kind::buffer, 1, 0, 0}, n},
            std::nullopt}},
          {{second,
            {1, 1, 1},
            {32, 1, 1},
            {{Arg::Kind::buffer, 0, 0, 0},
             {Arg::Kind::buffer, 1, 0, 0},
             {Arg::Kind::buffer, 2, 0, 0},
             n},
            std::nullopt}}};
}

class CudaExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake = &state_;
    state_.kernels = {{"add_one", {add_one, 3}}, {"scale", {scale, 4}}, {"fails", {scale, 4}}};
    driver_ = stand_in_driver();
  }
  void TearDown() override { fake = nullptr; }

  std::unique_ptr<CudaExecutor> make(CudaKernelLaunches launches = two_kernel_launches()) {
    Expected<std::unique_ptr<CudaExecutor>> executor =
        CudaExecutor::create(two_kernel_program(), "cubin", std::move(launches), 0, &driver_);
    EXPECT_TRUE(executor) << executor.status().message();
    return executor ? std::move(*executor) : nullptr;
  }

  // Runs `executor` on x = 0, 1, ..., and checks both outputs.
  void expect_runs(CudaExecutor& executor, const RunHooks& hooks = {}) {
    std::vector<float> x(kElements), y(kElements), copy(kElements);
    for (int64_t i = 0; i < kElements; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i);
    const void* inputs[] = {x.data()};
    void* outputs[] = {y.data(), copy.data()};
    ASSERT_TRUE(executor.run(inputs, outputs, hooks));
    for (int64_t i = 0; i < kElements; ++i) {
      EXPECT_EQ(y[static_cast<size_t>(i)], 2.0f * (static_cast<float>(i) + 1)) << i;
      EXPECT_EQ(copy[static_cast<size_t>(i)], static_cast<float>(i) + 1) << i;
    }
  }

  Fake state_;
  CudaDriver driver_;
};

TEST_F(CudaExecutorTest, RunsTheProgramAndReplaysItAsAGraph) {
  std::unique_ptr<CudaExecutor> executor = make();
  ASSERT_NE(executor, nullptr);
  EXPECT_EQ(state_.uploads, 1) << "the constants, uploaded once";
  expect_runs(*executor);
  expect_runs(*executor);
  EXPECT_EQ(state_.graphs.size(), 1u) << "captured once";
  EXPECT_EQ(state_.graph_launches, 2);
  EXPECT_EQ(state_.launches, 4);
  EXPECT_EQ(state_.uploads, 3) << "one input per run";
  executor->use_graphs(false);
  expect_runs(*executor);
  EXPECT_EQ(state_.graph_launches, 2);
  EXPECT_EQ(state_.launches, 6);
}

TEST_F(CudaExecutorTest, RunsWithInputsAndOutputsLeftOnTheDeviceCopyNothing) {
  std::unique_ptr<CudaExecutor> executor = make();
  ASSERT_NE(executor, nullptr);
  std::vector<float> x(kElements, 1.0f), y(kElements, -1.0f), copy(kElements, -1.0f);
  const void* inputs[] = {x.data()};
  void* outputs[] = {y.data(), copy.data()};
  ASSERT_TRUE(executor->run(inputs, outputs, {.io_on_device = true}));
  EXPECT_EQ(state_.uploads, 2) << "the constants, and the first run's input";
  EXPECT_EQ(state_.downloads, 0);
  EXPECT_EQ(y[0], -1.0f) << "the outputs stay on the device";
  x[0] = 5.0f;  // not seen: the device keeps the first run's input
  ASSERT_TRUE(executor->run(inputs, outputs, {.io_on_device = true}));
  EXPECT_EQ(state_.uploads, 2);
  ASSERT_TRUE(executor->run(inputs, outputs));
  EXPECT_EQ(state_.uploads, 3);
  EXPECT_EQ(state_.downloads, 2);
  EXPECT_EQ(y[0], 12.0f);
  EXPECT_EQ(state_.launches, 6) << "every run ran the program";
}

TEST_F(CudaExecutorTest, RunsOnTheCallersDeviceMemoryInOrderWithItsStream) {
  std::unique_ptr<CudaExecutor> executor = make();
  ASSERT_NE(executor, nullptr);
  // The caller's tensors, in (stand-in) device memory.
  std::vector<float> x(kElements), y(kElements), copy(kElements);
  const auto address = [](std::vector<float>& v) { return reinterpret_cast<uintptr_t>(v.data()); };
  int caller_stream = 0;
  for (int run = 0; run < 2; ++run) {
    for (int64_t i = 0; i < kElements; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i + run);
    const uint64_t inputs[] = {address(x)};
    const uint64_t outputs[] = {address(y), address(copy)};
    ASSERT_TRUE(executor->run_on_stream(inputs, outputs, &caller_stream));
    for (int64_t i = 0; i < kElements; ++i) {
      EXPECT_EQ(y[static_cast<size_t>(i)], 2.0f * (static_cast<float>(i + run) + 1)) << i;
      EXPECT_EQ(copy[static_cast<size_t>(i)], static_cast<float>(i + run) + 1) << i;
    }
  }
  EXPECT_EQ(state_.uploads, 1) << "the constants only: nothing crosses to or from the host";
  EXPECT_EQ(state_.downloads, 0);
  EXPECT_EQ(state_.graphs.size(), 1u) << "the graph holds the executor's buffers: captured once";
  // Each run: the executor's stream waits for the caller's, then the caller's for the run.
  const auto ours = reinterpret_cast<CUstream>(&executor_stream);
  const auto theirs = reinterpret_cast<CUstream>(&caller_stream);
  EXPECT_EQ(state_.waiting_streams, (std::vector<CUstream>{ours, theirs, ours, theirs}));
  const uint64_t too_few[] = {address(y)};
  EXPECT_FALSE(executor->run_on_stream(too_few, too_few, &caller_stream));
}

// A caller's tensor in (stand-in) device memory, at the allocator's alignment or `offset` bytes
// past it (a view into a larger tensor).
struct CallerTensor {
  explicit CallerTensor(size_t offset = 0)
      : memory(static_cast<std::byte*>(std::aligned_alloc(256, 2 * 256))), at(offset) {
    static_assert(kBytes <= 256, "a tensor and its offset fit in the allocation");
  }
  ~CallerTensor() { std::free(memory); }
  CallerTensor(const CallerTensor&) = delete;
  CallerTensor& operator=(const CallerTensor&) = delete;
  float* data() const { return reinterpret_cast<float*>(memory + at); }
  uint64_t address() const { return reinterpret_cast<uintptr_t>(data()); }
  std::byte* memory;
  size_t at;
};

// The kernels read the caller's inputs and write its outputs where they lie: no copy in or out,
// each set of addresses captured as a graph once and replayed when it comes again, and the
// executor's own buffers back for host memory. A tensor off the alignment the program's own
// buffers have goes through them with a copy.
TEST_F(CudaExecutorTest, ReadsAndWritesTheCallersMemoryWhereItLies) {
  std::unique_ptr<CudaExecutor> executor = make();
  ASSERT_NE(executor, nullptr);
  int caller_stream = 0;
  CallerTensor x[2], y[2], copy[2];
  const auto run = [&](const CallerTensor& in, const CallerTensor& out, const CallerTensor& out2,
                       float first) {
    for (int64_t i = 0; i < kElements; ++i) in.data()[i] = first + static_cast<float>(i);
    const uint64_t inputs[] = {in.address()};
    const uint64_t outputs[] = {out.address(), out2.address()};
    ASSERT_TRUE(executor->run_on_stream(inputs, outputs, &caller_stream));
    for (int64_t i = 0; i < kElements; ++i) {
      EXPECT_EQ(out.data()[i], 2.0f * (first + static_cast<float>(i) + 1)) << i;
      EXPECT_EQ(out2.data()[i], first + static_cast<float>(i) + 1) << i;
    }
  };
  run(x[0], y[0], copy[0], 0);
  run(x[1], y[1], copy[1], 10);
  run(x[0], y[0], copy[0], 20);
  ASSERT_EQ(state_.graphs.size(), 2u) << "one graph per set of addresses, the first replayed";
  for (size_t g = 0; g < 2; ++g) {
    const std::vector<RecordedLaunch>& graph = state_.graphs[g];
    ASSERT_EQ(graph.size(), 3u) << "the two kernels and the program's own copy step, no other";
    EXPECT_EQ(graph[0].args[0], x[g].address()) << "add_one reads the caller's input";
    EXPECT_EQ(graph[1].args[2], y[g].address()) << "scale writes the caller's output";
    EXPECT_EQ(graph[2].args[0], copy[g].address()) << "the copy step writes the caller's output";
  }
  EXPECT_EQ(state_.graph_launches, 3);
  expect_runs(*executor);  // host memory, through the executor's own buffers

  CallerTensor off(4), y2, copy2;
  run(off, y2, copy2, 30);
  const std::vector<RecordedLaunch>& graph = state_.graphs.back();
  ASSERT_EQ(state_.graphs.size(), 4u);
  EXPECT_NE(graph[0].args[0], off.address()) << "read from the own buffer, copied in first";
}

// The GPUs the stand-in driver has, 0 and 1, and those an executor opened.
std::vector<int> gpus_opened;
CUresult fake_device_get(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal > 1) return CUDA_ERROR_INVALID_DEVICE;
  gpus_opened.push_back(ordinal);
  *device = ordinal;
  return CUDA_SUCCESS;
}

// A graph compiled for cuda:N runs on GPU N (the backend compiles for its tensors' device):
// each executor opens its own ordinal, and one the machine lacks is an error naming it.
TEST_F(CudaExecutorTest, OpensTheGpuOfItsOrdinal) {
  driver_.cuDeviceGet = fake_device_get;
  gpus_opened.clear();
  for (const int ordinal : {1, 0}) {
    Expected<std::unique_ptr<CudaExecutor>> executor = CudaExecutor::create(
        two_kernel_program(), "cubin", two_kernel_launches(), ordinal, &driver_);
    ASSERT_TRUE(executor) << executor.status().message();
    expect_runs(**executor);
  }
  EXPECT_EQ(gpus_opened, (std::vector<int>{1, 0}));
  Expected<std::unique_ptr<CudaExecutor>> missing =
      CudaExecutor::create(two_kernel_program(), "cubin", two_kernel_launches(), 2, &driver_);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("GPU 2"), std::string::npos)
      << missing.status().message();
}

TEST_F(CudaExecutorTest, ProfilesEachStepWithEvents) {
  std::unique_ptr<CudaExecutor> executor = make();
  ASSERT_NE(executor, nullptr);
  Profile profile;
  expect_runs(*executor, {.profile = &profile});
  expect_runs(*executor, {.profile = &profile});
  EXPECT_EQ(profile.runs, 2);
  EXPECT_EQ(profile.step_seconds, (std::vector<double>{2e-3, 2e-3, 2e-3}));
  EXPECT_TRUE(state_.graphs.empty()) << "a profiled run launches step by step";
}

TEST_F(CudaExecutorTest, TheCheckModeSeesEachStepsBuffersOnTheHost) {
  std::unique_ptr<CudaExecutor> executor = make();
  ASSERT_NE(executor, nullptr);
  std::vector<int> steps;
  RunHooks hooks;
  hooks.after_step = [&](int step, std::span<void* const> buffers) -> Status {
    steps.push_back(step);
    if (step == 1) {  // mul #2 read the arena's x + 1 and the constant, wrote (x + 1) * 2
      EXPECT_EQ(static_cast<const float*>(buffers[0])[3], 4.0f);
      EXPECT_EQ(static_cast<const float*>(buffers[1])[0], 2.0f);
      EXPECT_EQ(static_cast<const float*>(buffers[2])[3], 8.0f);
    }
    return Status::ok();
  };
  expect_runs(*executor, hooks);
  EXPECT_EQ(steps, (std::vector<int>{0, 1, 2}));
}

TEST_F(CudaExecutorTest, SharedArenasKeepBothProgramsRight) {
  std::unique_ptr<CudaExecutor> first = make();
  std::unique_ptr<CudaExecutor> second = make();
  ASSERT_TRUE(first && second);
  expect_runs(*first);
  first->share_arena(*second);
  expect_runs(*first);
  expect_runs(*second);
}

// The executor is made with its constants alone; the first run that needs its own arena and
// buffers makes them, and running out of memory then says what the program needs.
TEST_F(CudaExecutorTest, RunningOutOfMemorySaysWhatWasNeededAndFree) {
  state_.free_bytes = 100;
  std::unique_ptr<CudaExecutor> executor = make();
  ASSERT_NE(executor, nullptr);
  EXPECT_EQ(state_.free_bytes, 100 - two_kernel_program()->constants.size());
  std::vector<float> x(kElements), y(kElements), copy(kElements);
  const void* inputs[] = {x.data()};
  void* outputs[] = {y.data(), copy.data()};
  const Status status = executor->run(inputs, outputs);
  ASSERT_FALSE(status);
  const std::string& message = status.message();
  EXPECT_NE(message.find("out of GPU memory allocating the"), std::string::npos) << message;
  EXPECT_NE(message.find("the program needs "), std::string::npos) << message;
  EXPECT_NE(message.find("the GPU has 32 B free"), std::string::npos) << message;
}

// A run on the caller's memory with the caller's arena (PyTorch's caching allocator's) allocates
// nothing of the executor's own: intermediates live in the given arena, at the plan's offsets,
// and another arena address is bound (and captured) as other tensors are. An arena off the
// alignment is refused.
TEST_F(CudaExecutorTest, RunsInTheCallersArenaAndAllocatesNoneOfItsOwn) {
  std::unique_ptr<CudaExecutor> executor = make();
  ASSERT_NE(executor, nullptr);
  const size_t free_after_create = state_.free_bytes;
  int caller_stream = 0;
  CallerTensor x, y, copy;
  std::vector<std::byte*> arenas;
  for (int a = 0; a < 2; ++a) {
    static_assert(2 * kBytes <= 256, "the program's arena fits in one aligned block");
    arenas.push_back(static_cast<std::byte*>(std::aligned_alloc(256, 256)));
  }
  for (int run = 0; run < 3; ++run) {
    std::byte* arena = arenas[static_cast<size_t>(run % 2)];
    for (int64_t i = 0; i < kElements; ++i) x.data()[i] = static_cast<float>(i + run);
    const uint64_t inputs[] = {x.address()};
    const uint64_t outputs[] = {y.address(), copy.address()};
    ASSERT_TRUE(executor->run_on_stream(inputs, outputs, &caller_stream,
                                        reinterpret_cast<uintptr_t>(arena)));
    const auto* intermediate = reinterpret_cast<const float*>(arena + kBytes);
    for (int64_t i = 0; i < kElements; ++i) {
      EXPECT_EQ(y.data()[i], 2.0f * (static_cast<float>(i + run) + 1)) << i;
      EXPECT_EQ(intermediate[i], static_cast<float>(i + run) + 1) << "x + 1, in the given arena";
    }
  }
  EXPECT_EQ(state_.free_bytes, free_after_create) << "no arena or buffers of the executor's own";
  EXPECT_EQ(state_.graphs.size(), 2u) << "one graph per arena address, the first replayed";
  const uint64_t inputs[] = {x.address()};
  const uint64_t outputs[] = {y.address(), copy.address()};
  const Status misaligned = executor->run_on_stream(inputs, outputs, &caller_stream,
                                                    reinterpret_cast<uintptr_t>(arenas[0] + 8));
  ASSERT_FALSE(misaligned);
  EXPECT_NE(misaligned.message().find("not 256-byte aligned"), std::string::npos)
      << misaligned.message();
  for (std::byte* arena : arenas) std::free(arena);
}

TEST_F(CudaExecutorTest, AFailingLaunchNamesTheKernelAndTheError) {
  std::unique_ptr<CudaExecutor> executor = make(two_kernel_launches("fails"));
  ASSERT_NE(executor, nullptr);
  executor->use_graphs(false);
  std::vector<float> x(kElements), y(kElements), copy(kElements);
  const void* inputs[] = {x.data()};
  void* outputs[] = {y.data(), copy.data()};
  const Status status = executor->run(inputs, outputs);
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find("launching fails of kernel mul #2: "
                                  "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
            std::string::npos)
      << status.message();
}

TEST_F(CudaExecutorTest, AFunctionMissingFromTheCubinIsAnErrorWhenMade) {
  Expected<std::unique_ptr<CudaExecutor>> executor = CudaExecutor::create(
      two_kernel_program(), "cubin", two_kernel_launches("no_such_function"), 0, &driver_);
  ASSERT_FALSE(executor);
  EXPECT_NE(executor.status().message().find("mul #2: finding no_such_function in the cubin"),
            std::string::npos)
      << executor.status().message();
}


#ifdef KILN_HAVE_CUBLASLT_HEADERS

// --- Gemms: through a stand-in cuBLASLt, or the template kernel -------------------------------

// The stand-in cuBLASLt computes what the real one is asked for, column-major, from the
// layouts and transposes it was given: the executor's translation of a row-major product has
// to be right for the result to be.
struct FakeLayout {
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct FakeDesc {
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
};
std::deque<FakeLayout> fake_layouts;
std::deque<FakeDesc> fake_descs;
int fake_matmuls = 0;

template <typename... Args>
cublasStatus_t lt_succeed(Args...) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t lt_create(cublasLtHandle_t* handle) {
  static int lt = 0;
  *handle = reinterpret_cast<cublasLtHandle_t>(&lt);
  return CUBLAS_STATUS_SUCCESS;
}
size_t lt_version() { return 130002; }
const char* lt_name(cublasStatus_t) { return "CUBLAS_STATUS_NOT_SUPPORTED"; }
cublasStatus_t lt_desc_create(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                              cudaDataType_t) {
  fake_descs.emplace_back().compute = compute;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(&fake_descs.back());
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t lt_desc_set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                           const void* value, size_t) {
  FakeDesc& d = *reinterpret_cast<FakeDesc*>(desc);
  if (attribute == CUBLASLT_MATMUL_DESC_TRANSA) d.op_a = *static_cast<const cublasOperation_t*>(value);
  if (attribute == CUBLASLT_MATMUL_DESC_TRANSB) d.op_b = *static_cast<const cublasOperation_t*>(value);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t lt_layout_create(cublasLtMatrixLayout_t* layout, cudaDataType, uint64_t rows,
                                uint64_t cols, int64_t ld) {
  fake_layouts.push_back({rows, cols, ld});
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(&fake_layouts.back());
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t lt_layout_set(cublasLtMatrixLayout_t layout,
                             cublasLtMatrixLayoutAttribute_t attribute, const void* value, size_t) {
  FakeLayout& l = *reinterpret_cast<FakeLayout*>(layout);
  if (attribute == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) l.batch = *static_cast<const int32_t*>(value);
  if (attribute == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) {
    l.stride = *static_cast<const int64_t*>(value);
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t lt_preference_create(cublasLtMatmulPreference_t* preference) {
  static int p = 0;
  *preference = reinterpret_cast<cublasLtMatmulPreference_t>(&p);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t lt_heuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                            cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                            cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                            cublasLtMatmulHeuristicResult_t*, int* found) {
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t lt_matmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha,
                         const void* a, cublasLtMatrixLayout_t a_layout, const void* b,
                         cublasLtMatrixLayout_t b_layout, const void* beta, const void* c,
                         cublasLtMatrixLayout_t c_layout, void* d, cublasLtMatrixLayout_t,
                         const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t) {
  ++fake_matmuls;
  const FakeDesc& ops = *reinterpret_cast<const FakeDesc*>(desc);
  const FakeLayout& la = *reinterpret_cast<const FakeLayout*>(a_layout);
  const FakeLayout& lb = *reinterpret_cast<const FakeLayout*>(b_layout);
  const FakeLayout& lc = *reinterpret_cast<const FakeLayout*>(c_layout);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  const auto* z = static_cast<const float*>(c);
  auto* out = static_cast<float*>(d);
  const bool ta = ops.op_a == CUBLAS_OP_T, tb = ops.op_b == CUBLAS_OP_T;
  const uint64_t depth = ta ? la.rows : la.cols;
  EXPECT_EQ(lc.rows, ta ? la.cols : la.rows);
  EXPECT_EQ(lc.cols, tb ? lb.rows : lb.cols);
  EXPECT_EQ(depth, tb ? lb.cols : lb.rows);
  EXPECT_TRUE(la.batch == lc.batch && lb.batch == lc.batch) << "one batch count";
  for (int32_t batch = 0; batch < lc.batch; ++batch) {
    const float* xb = x + batch * la.stride;
    const float* yb = y + batch * lb.stride;
    const float* zb = z + batch * lc.stride;
    float* ob = out + batch * lc.stride;
    for (uint64_t i = 0; i < lc.rows; ++i) {
      for (uint64_t j = 0; j < lc.cols; ++j) {
        float sum = 0;
        for (uint64_t p = 0; p < depth; ++p) {
          sum += (ta ? xb[p + i * la.ld] : xb[i + p * la.ld]) *
                 (tb ? yb[j + p * lb.ld] : yb[p + j * lb.ld]);
        }
        ob[i + j * lc.ld] = *static_cast<const float*>(alpha) * sum +
                            *static_cast<const float*>(beta) * zb[i + j * lc.ld];
      }
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

CublasLt stand_in_cublaslt() {
  CublasLt lt;
  lt.cublasLtCreate = lt_create;
  lt.cublasLtDestroy = lt_succeed<cublasLtHandle_t>;
  lt.cublasLtGetVersion = lt_version;
  lt.cublasLtGetStatusName = lt_name;
  lt.cublasLtGetStatusString = lt_name;
  lt.cublasLtMatmulDescCreate = lt_desc_create;
  lt.cublasLtMatmulDescDestroy = lt_succeed<cublasLtMatmulDesc_t>;
  lt.cublasLtMatmulDescSetAttribute = lt_desc_set;
  lt.cublasLtMatrixLayoutCreate = lt_layout_create;
  lt.cublasLtMatrixLayoutDestroy = lt_succeed<cublasLtMatrixLayout_t>;
  lt.cublasLtMatrixLayoutSetAttribute = lt_layout_set;
  lt.cublasLtMatmulPreferenceCreate = lt_preference_create;
  lt.cublasLtMatmulPreferenceDestroy = lt_succeed<cublasLtMatmulPreference_t>;
  lt.cublasLtMatmulPreferenceSetAttribute =
      lt_succeed<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void*,
                 size_t>;
  lt.cublasLtMatmulAlgoGetHeuristic = lt_heuristic;
  lt.cublasLtMatmul = lt_matmul;
  return lt;
}

// The template kernel's stand-in: the row-major products as the prelude's kiln_gemm_f32
// computes them, from the same fifteen arguments, one per z of the grid.
void template_gemm(const std::vector<uint64_t>& args, unsigned grid_z) {
  const auto m = static_cast<int64_t>(args[3]), n = static_cast<int64_t>(args[4]),
             k = static_cast<int64_t>(args[5]), lda = static_cast<int64_t>(args[6]),
             ldb = static_cast<int64_t>(args[7]), ldc = static_cast<int64_t>(args[8]);
  const bool ta = args[9] != 0, tb = args[10] != 0, accumulate = args[11] != 0;
  for (unsigned batch = 0; batch < grid_z; ++batch) {
    const float* a = as_pointer<float>(args[0]) + batch * args[12];
    const float* b = as_pointer<float>(args[1]) + batch * args[13];
    float* c = as_pointer<float>(args[2]) + batch * args[14];
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        float sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          sum += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
        }
        c[i * ldc + j] = accumulate ? c[i * ldc + j] + sum : sum;
      }
    }
  }
}

constexpr int64_t kM = 3, kN = 4, kK = 5;

// C = op(A) op(B), then C += op(A) op(B) again: output 0 is 2 op(A) op(B).
std::shared_ptr<const Program> gemm_program() {
  auto program = std::make_shared<Program>();
  program->input_bytes = {kM * kK * 4, kK * kN * 4};
  program->output_bytes = {kM * kN * 4};
  program->num_kernels = 1;
  program->buffers = {{Storage::input, 0, 0, kM * kK * 4},
                      {Storage::input, 1, 0, kK * kN * 4},
                      {Storage::output, 0, 0, kM * kN * 4}};
  program->steps = {{Step::Kind::kernel, 0, {0, 1, 2}, "matmul #1"}};
  return program;
}

CudaKernelLaunches gemm_launches(bool ta, bool tb, bool tf32 = false) {
  using Arg = CudaLaunchArg;
  CudaKernelLaunches launches(1);
  for (const bool accumulate : {false, true}) {
    const CudaGemm gemm{.type = CudaGemm::Type::f32, .m = kM, .n = kN, .k = kK,
                        .lda = ta ? kM : kK, .ldb = tb ? kK : kN, .ldc = kN,
                        .transpose_a = ta, .transpose_b = tb, .accumulate = accumulate,
                        .tf32 = tf32};
    CudaLaunch launch{.function = "kiln_gemm_f32", .grid = {1, 1, 1}, .block = {16, 16, 1},
                      .args = {{Arg::Kind::buffer, 0, 0, 0}, {Arg::Kind::buffer, 1, 0, 0},
                               {Arg::Kind::buffer, 2, 0, 0}},
                      .gemm = gemm};
    for (const int64_t value : {gemm.m, gemm.n, gemm.k, gemm.lda, gemm.ldb, gemm.ldc,
                                int64_t{ta}, int64_t{tb}, int64_t{accumulate}, int64_t{0},
                                int64_t{0}, int64_t{0}}) {
      launch.args.push_back({Arg::Kind::i64, 0, 0, value});
    }
    launches[0].push_back(launch);
  }
  return launches;
}

// 2 op(A) op(B) for A and B filled with 1, 2, 3, ... as stored.
std::vector<float> expected_gemm(bool ta, bool tb, const std::vector<float>& a,
                                 const std::vector<float>& b) {
  std::vector<float> c(kM * kN);
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      float sum = 0;
      for (int64_t p = 0; p < kK; ++p) {
        sum += a[static_cast<size_t>(ta ? p * kM + i : i * kK + p)] *
               b[static_cast<size_t>(tb ? j * kK + p : p * kN + j)];
      }
      c[static_cast<size_t>(i * kN + j)] = 2 * sum;
    }
  }
  return c;
}

TEST_F(CudaExecutorTest, GemmsRunThroughCublasLtAsColumnMajorTransposes) {
  state_.kernels["kiln_gemm_f32"] = {template_gemm, 15};
  state_.free_bytes = size_t{1} << 30;  // cuBLASLt's workspace is 32 MiB per executor
  const CublasLt lt = stand_in_cublaslt();
  std::vector<float> a(kM * kK), b(kK * kN);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) - 3;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      SCOPED_TRACE(fmt::format("transpose a {} b {}", ta, tb));
      for (const bool with_lt : {true, false}) {
        Expected<std::unique_ptr<CudaExecutor>> executor = CudaExecutor::create(
            gemm_program(), "cubin", gemm_launches(ta, tb), 0, &driver_, with_lt ? &lt : nullptr);
        ASSERT_TRUE(executor) << executor.status().message();
        const int matmuls = fake_matmuls, launches = state_.launches;
        std::vector<float> c(kM * kN, -1);
        const void* inputs[] = {a.data(), b.data()};
        void* outputs[] = {c.data()};
        ASSERT_TRUE((*executor)->run(inputs, outputs));
        EXPECT_EQ(c, expected_gemm(ta, tb, a, b));
        if (with_lt) {
          EXPECT_EQ((*executor)->gemm_library(), "cuBLASLt 13.0.2");
          EXPECT_EQ((*executor)->description(), "Stand-in GPU, gemms through cuBLASLt 13.0.2");
          EXPECT_EQ(fake_matmuls - matmuls, 2);
          EXPECT_EQ(state_.launches, launches) << "no template kernel";
        } else {
          EXPECT_EQ((*executor)->gemm_library(),
                    "template kernel (no cuBLASLt given with a test's driver)");
          EXPECT_EQ(state_.launches - launches, 2);
        }
      }
    }
  }
}

// --precision tf32's f32 products ask cuBLASLt for TF32 tensor cores, the others for exact f32.
TEST_F(CudaExecutorTest, Tf32GemmsComputeInTf32AndOthersInF32) {
  state_.kernels["kiln_gemm_f32"] = {template_gemm, 15};
  state_.free_bytes = size_t{1} << 30;
  const CublasLt lt = stand_in_cublaslt();
  for (const bool tf32 : {false, true}) {
    const size_t before = fake_descs.size();
    Expected<std::unique_ptr<CudaExecutor>> executor = CudaExecutor::create(
        gemm_program(), "cubin", gemm_launches(false, false, tf32), 0, &driver_, &lt);
    ASSERT_TRUE(executor) << executor.status().message();
    ASSERT_EQ(fake_descs.size(), before + 2) << "one descriptor per gemm";
    for (size_t d = before; d < fake_descs.size(); ++d) {
      EXPECT_EQ(fake_descs[d].compute, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
    }
  }
}

TEST_F(CudaExecutorTest, AStridedBatchOfGemmsIsOneLaunchEitherWay) {
  // Three products C_i = A_i B of 2 x 3 by 3 x 2: A's matrices 6 elements apart, B shared
  // (stride 0), C's 4 apart.
  state_.kernels["kiln_gemm_f32"] = {template_gemm, 15};
  state_.free_bytes = size_t{1} << 30;
  const CublasLt lt = stand_in_cublaslt();
  constexpr int64_t batch = 3, m = 2, n = 2, k = 3;
  auto program = std::make_shared<Program>();
  program->input_bytes = {batch * m * k * 4, k * n * 4};
  program->output_bytes = {batch * m * n * 4};
  program->num_kernels = 1;
  program->buffers = {{Storage::input, 0, 0, batch * m * k * 4},
                      {Storage::input, 1, 0, k * n * 4},
                      {Storage::output, 0, 0, batch * m * n * 4}};
  program->steps = {{Step::Kind::kernel, 0, {0, 1, 2}, "matmul #1"}};
  using Arg = CudaLaunchArg;
  CudaLaunch launch{.function = "kiln_gemm_f32", .grid = {1, 1, batch}, .block = {16, 16, 1},
                    .args = {{Arg::Kind::buffer, 0, 0, 0}, {Arg::Kind::buffer, 1, 0, 0},
                             {Arg::Kind::buffer, 2, 0, 0}},
                    .gemm = CudaGemm{.type = CudaGemm::Type::f32, .m = m, .n = n, .k = k,
                                     .lda = k, .ldb = n, .ldc = n, .batch = batch,
                                     .stride_a = m * k, .stride_b = 0, .stride_c = m * n}};
  for (const int64_t value : {m, n, k, k, n, n, int64_t{0}, int64_t{0}, int64_t{0}, m * k,
                              int64_t{0}, m * n}) {
    launch.args.push_back({Arg::Kind::i64, 0, 0, value});
  }
  std::vector<float> a(batch * m * k), b(k * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) - 4;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 4) + 1;
  std::vector<float> expected(batch * m * n, 0);
  for (int64_t z = 0; z < batch; ++z) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t p = 0; p < k; ++p) {
          expected[static_cast<size_t>(z * m * n + i * n + j)] +=
              a[static_cast<size_t>(z * m * k + i * k + p)] * b[static_cast<size_t>(p * n + j)];
        }
      }
    }
  }
  for (const bool with_lt : {true, false}) {
    SCOPED_TRACE(with_lt ? "cuBLASLt" : "template kernel");
    Expected<std::unique_ptr<CudaExecutor>> executor =
        CudaExecutor::create(program, "cubin", {{launch}}, 0, &driver_, with_lt ? &lt : nullptr);
    ASSERT_TRUE(executor) << executor.status().message();
    const int matmuls = fake_matmuls, launches = state_.launches;
    std::vector<float> c(batch * m * n, -1);
    const void* inputs[] = {a.data(), b.data()};
    void* outputs[] = {c.data()};
    ASSERT_TRUE((*executor)->run(inputs, outputs));
    EXPECT_EQ(c, expected);
    EXPECT_EQ(fake_matmuls - matmuls + state_.launches - launches, 1) << "one call for the batch";
  }
}

#endif  // KILN_HAVE_CUBLASLT_HEADERS
#endif

}  // namespace
}  // namespace kiln::runtime
