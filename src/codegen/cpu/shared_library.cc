#include "codegen/cpu/shared_library.h"

#include <dlfcn.h>
#include <elf.h>

#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "support/files.h"

namespace kiln::codegen::cpu {
namespace {

// Generated libraries are small; a larger file is not one of ours.
constexpr int64_t kMaxLibraryBytes = int64_t{256} << 20;

bool within(uint64_t offset, uint64_t size, uint64_t file_size) {
  return offset <= file_size && size <= file_size - offset;
}

// The names of the libraries a complete 64-bit ELF file needs, or an error when it is not
// one (bad magic, or a program segment or the section header table past the end of the file).
Expected<std::vector<std::string>> inspect_elf(const std::filesystem::path& path) {
  KILN_ASSIGN_OR_RETURN(const std::string bytes, read_file(path.string(), kMaxLibraryBytes));
  const uint64_t size = bytes.size();
  const auto incomplete = [&] {
    return Status::errorf("'{}' is not a complete 64-bit ELF file ({} bytes)", path.string(),
                          size);
  };
  if (size < sizeof(Elf64_Ehdr)) return incomplete();
  Elf64_Ehdr header;
  std::memcpy(&header, bytes.data(), sizeof header);
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 ||
      header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_phentsize != sizeof(Elf64_Phdr) ||
      !within(header.e_phoff, uint64_t{header.e_phnum} * sizeof(Elf64_Phdr), size) ||
      !within(header.e_shoff, uint64_t{header.e_shnum} * header.e_shentsize, size)) {
    return incomplete();
  }
  std::vector<Elf64_Phdr> segments(header.e_phnum);
  std::memcpy(segments.data(), bytes.data() + header.e_phoff,
              segments.size() * sizeof(Elf64_Phdr));
  for (const Elf64_Phdr& segment : segments) {
    if (!within(segment.p_offset, segment.p_filesz, size)) return incomplete();
  }

  // DT_NEEDED entries are offsets into the string table, which DT_STRTAB gives as a virtual
  // address inside a loaded segment.
  std::vector<uint64_t> needed;
  std::optional<uint64_t> strings;
  for (const Elf64_Phdr& segment : segments) {
    if (segment.p_type != PT_DYNAMIC) continue;
    for (uint64_t at_entry = segment.p_offset;
         at_entry + sizeof(Elf64_Dyn) <= segment.p_offset + segment.p_filesz;
         at_entry += sizeof(Elf64_Dyn)) {
      Elf64_Dyn entry;
      std::memcpy(&entry, bytes.data() + at_entry, sizeof entry);
      if (entry.d_tag == DT_NULL) break;
      if (entry.d_tag == DT_NEEDED) needed.push_back(entry.d_un.d_val);
      if (entry.d_tag == DT_STRTAB) strings = entry.d_un.d_ptr;
    }
  }
  std::vector<std::string> names;
  if (!strings) return names;
  for (const Elf64_Phdr& segment : segments) {
    if (segment.p_type != PT_LOAD || *strings < segment.p_vaddr ||
        *strings - segment.p_vaddr >= segment.p_filesz) {
      continue;
    }
    const uint64_t table = segment.p_offset + (*strings - segment.p_vaddr);
    for (uint64_t offset : needed) {
      if (offset >= size - table) return incomplete();
      const char* name = bytes.data() + table + offset;
      names.emplace_back(name, strnlen(name, size - table - offset));
    }
  }
  return names;
}

}  // namespace

Expected<SharedLibrary> SharedLibrary::open(const std::filesystem::path& path) {
  KILN_ASSIGN_OR_RETURN(const std::vector<std::string> needed, inspect_elf(path));
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return Status::errorf("cannot load '{}': {}", path.string(), dlerror());
  }
  for (const std::string& name : needed) {
    // Already loaded as a dependency: RTLD_NOLOAD finds it, RTLD_NODELETE pins it.
    if (void* pinned = dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE)) {
      dlclose(pinned);
    }
  }
  return SharedLibrary(handle, path);
}

SharedLibrary::SharedLibrary(SharedLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), path_(std::move(other.path_)) {}

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

SharedLibrary::~SharedLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

Expected<void*> SharedLibrary::symbol(const std::string& name) const {
  dlerror();  // clear a stale error
  void* address = dlsym(handle_, name.c_str());
  if (address == nullptr) {
    const char* why = dlerror();
    return Status::errorf("'{}' has no symbol '{}'{}{}", path_.string(), name,
                          why != nullptr ? ": " : "", why != nullptr ? why : "");
  }
  return address;
}

}  // namespace kiln::codegen::cpu
