#include "runtime/cuda_driver.h"

#include <dlfcn.h>

#include <string_view>

namespace kiln::runtime {

#ifdef KILN_HAVE_CUDA_HEADERS

namespace {

#define KILN_CUDA_STRINGIFY_EXPANDED(name) KILN_CUDA_STRINGIFY(name)
#define KILN_CUDA_STRINGIFY(name) #name

// The symbol to try when the one cuda.h names is missing: cuEventElapsedTime_v2 is exported
// from CUDA 12.8 on, and the first version, of the same signature, by every driver.
std::string_view older_symbol(std::string_view symbol) {
  return symbol == "cuEventElapsedTime_v2" ? "cuEventElapsedTime" : "";
}

template <typename Function>
Status resolve(void* library, std::string_view symbol, Function& function) {
  void* address = dlsym(library, std::string(symbol).c_str());
  if (address == nullptr && !older_symbol(symbol).empty()) {
    address = dlsym(library, std::string(older_symbol(symbol)).c_str());
  }
  if (address == nullptr) {
    return Status::errorf(
        "the NVIDIA driver's libcuda.so.1 has no {}: it is older than the "
        "CUDA 12 driver API Kiln calls",
        symbol);
  }
  function = reinterpret_cast<Function>(address);
  return Status::ok();
}

Expected<CudaDriver> open_driver() {
  // Never closed: the driver stays loaded for the life of the process, as the CUDA runtime
  // keeps it.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    return Status::errorf(
        "no NVIDIA driver: libcuda.so.1 cannot be loaded ({}); --device cuda "
        "runs on a machine with an NVIDIA GPU and its driver",
        dlerror());
  }
  CudaDriver driver;
#define KILN_CUDA_RESOLVE(name) \
  KILN_RETURN_IF_ERROR(resolve(library, KILN_CUDA_STRINGIFY_EXPANDED(name), driver.name));
  KILN_CUDA_DRIVER_ENTRY_POINTS(KILN_CUDA_RESOLVE)
#undef KILN_CUDA_RESOLVE
  return driver;
}

// cuInit, the driver's version and the presence of a device, each failure said in words.
Status initialise(const CudaDriver& driver) {
  const CUresult init = driver.cuInit(0);
  if (init == CUDA_ERROR_NO_DEVICE) {
    return Status::error("no CUDA device: the NVIDIA driver is installed but sees no GPU");
  }
  KILN_RETURN_IF_ERROR(driver.check(init, "initialising the NVIDIA driver (cuInit)"));
  int version = 0;
  KILN_RETURN_IF_ERROR(driver.check(driver.cuDriverGetVersion(&version), "cuDriverGetVersion"));
  if (version < kMinCudaDriverVersion) {
    return Status::errorf("the NVIDIA driver supports CUDA {}.{}; Kiln needs CUDA {}.{} or newer",
                          version / 1000, version % 1000 / 10, kMinCudaDriverVersion / 1000,
                          kMinCudaDriverVersion % 1000 / 10);
  }
  int devices = 0;
  KILN_RETURN_IF_ERROR(driver.check(driver.cuDeviceGetCount(&devices), "cuDeviceGetCount"));
  if (devices == 0) {
    return Status::error("no CUDA device: the NVIDIA driver is installed but sees no GPU");
  }
  return Status::ok();
}

}  // namespace

Status CudaDriver::check(CUresult result, std::string_view what) const {
  if (result == CUDA_SUCCESS) return Status::ok();
  const char* name = nullptr;
  const char* description = nullptr;
  if (cuGetErrorName == nullptr || cuGetErrorName(result, &name) != CUDA_SUCCESS) name = nullptr;
  if (cuGetErrorString == nullptr || cuGetErrorString(result, &description) != CUDA_SUCCESS) {
    description = nullptr;
  }
  // Out of memory is the machine's limit; any other failure of a call Kiln makes is its own.
  const ErrorCode code =
      result == CUDA_ERROR_OUT_OF_MEMORY ? ErrorCode::resource_exhausted : ErrorCode::internal;
  return Status::errorf(code, "{}: {} ({})", what,
                        name != nullptr ? name : "CUDA error " + std::to_string(result),
                        description != nullptr ? description : "no description");
}

Expected<const CudaDriver*> load_cuda_driver() {
  // Loaded once; a failure is remembered, so every caller gets the same message.
  static const Expected<CudaDriver> driver = []() -> Expected<CudaDriver> {
    KILN_ASSIGN_OR_RETURN(CudaDriver opened, open_driver());
    KILN_RETURN_IF_ERROR(initialise(opened));
    return opened;
  }();
  if (!driver) return driver.status();
  return &*driver;
}

#else

Expected<const CudaDriver*> load_cuda_driver() {
  return Status::error(
      "Kiln was built without the CUDA toolkit's headers, so it has no GPU "
      "runtime (--device cuda-mapping-on-cpu runs the GPU mapping on this CPU)");
}

#endif

}  // namespace kiln::runtime
