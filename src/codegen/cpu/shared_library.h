// A loaded shared library (dlopen) that stays loaded as long as the object lives, so function
// pointers taken from it are valid exactly as long as it is.
//
// `open` first checks that the file is a complete ELF file (every program header's segment and
// the section header table lie inside the file), so a truncated file, such as a cache entry
// cut short by a crash or a full disk, is reported as an error instead of being mapped and
// faulting when the loader touches the missing pages.
//
// The libraries a loaded library depends on (its DT_NEEDED entries: the OpenMP runtime,
// libstdc++, libm) are pinned for the life of the process (RTLD_NODELETE): closing the last
// generated library must not unmap the OpenMP runtime under its idle worker threads.
#pragma once

#include <filesystem>
#include <string>

#include "support/status.h"

namespace kiln::codegen::cpu {

class SharedLibrary {
 public:
  // dlopen(path, RTLD_NOW | RTLD_LOCAL): every symbol is resolved now, none is exported to
  // libraries loaded later.
  static Expected<SharedLibrary> open(const std::filesystem::path& path);

  SharedLibrary(SharedLibrary&& other) noexcept;
  SharedLibrary& operator=(SharedLibrary&& other) noexcept;
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;
  ~SharedLibrary();

  // The address of an exported symbol, or an error naming it and the library.
  Expected<void*> symbol(const std::string& name) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  SharedLibrary(void* handle, std::filesystem::path path)
      : handle_(handle), path_(std::move(path)) {}
  void* handle_ = nullptr;
  std::filesystem::path path_;
};

}  // namespace kiln::codegen::cpu
