# The extension module kiln._kiln from src/kiln_module.cc, with nanobind from the Python
# environment CMake finds. Shared by python/CMakeLists.txt (the package pip builds) and
# python/bundle/CMakeLists.txt (the package a GPU bundle builds on its machine); the including
# file links Kiln's libraries.
find_package(Python 3.9 COMPONENTS Interpreter Development.Module REQUIRED)
execute_process(
  COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir
  OUTPUT_STRIP_TRAILING_WHITESPACE OUTPUT_VARIABLE nanobind_ROOT)
find_package(nanobind CONFIG REQUIRED)

nanobind_add_module(_kiln NB_STATIC src/kiln_module.cc)
# nanobind is a third party's: its sources build without Kiln's warnings (which CI makes
# errors), and its headers are system headers to Kiln's module.
target_compile_options(nanobind-static PRIVATE -w)
set_target_properties(nanobind-static PROPERTIES SYSTEM ON)
# The symbols of Kiln's libraries stay inside the module: exported, the header-only libraries'
# (nlohmann::json) would bind to another module's copies of another version, as PyTorch's,
# and crash.
target_link_options(_kiln PRIVATE -Wl,--exclude-libs,ALL)
