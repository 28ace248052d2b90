// Small file helpers shared by the io readers and writers.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

namespace deepinfer::io {

// Reads a whole text file (JSON configs and indexes). Errors name the file: missing, not a regular
// file, larger than `max_bytes`, unreadable.
std::string read_text_file(const std::filesystem::path& path, std::size_t max_bytes = 64u << 20);

// Writes `bytes` to `path` through a temporary file in the same directory renamed into place, so
// a reader never sees a half-written file. Errors name the file.
void write_file_atomically(const std::filesystem::path& path, std::span<const char> bytes);

}  // namespace deepinfer::io
