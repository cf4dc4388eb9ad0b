// Numbers and counts in the words messages and reports use: "3 nodes", "40.0 KiB", "4.560 ms".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

std::string count_noun(size_t count, std::string_view noun);  // "1 node", "3 nodes"
std::string format_bytes(int64_t bytes);                       // "512 B", "40.0 KiB", "1.5 MiB"
std::string format_seconds(double seconds);                    // "1.23 s", "4.560 ms", "7.8 us"

}  // namespace kiln
