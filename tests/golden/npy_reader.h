// Reads the NumPy (.npy, format 1.0/2.0, little-endian '<f4' or '<i4', C order) arrays of the golden
// fixtures. Test-only: the fixtures are ours, so anything unexpected fails the test loudly.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace deepinfer::golden {

template <typename T>
struct NpyArrayOf {
  std::vector<std::int64_t> shape;
  std::vector<T> data;
};
using NpyArray = NpyArrayOf<float>;

// descr: "<f4" for float, "<i4" for int32.
template <typename T>
NpyArrayOf<T> read_npy(const std::filesystem::path& path, const std::string& descr) {
  static_assert(sizeof(T) == 4);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 12 || bytes.compare(0, 6, "\x93NUMPY") != 0) throw std::runtime_error(path.string() + ": not .npy");
  const int major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    offset = 10;
  } else {
    for (int i = 0; i < 4; ++i) header_len |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    offset = 12;
  }
  const std::string header = bytes.substr(offset, header_len);
  if (header.find("'descr': '" + descr + "'") == std::string::npos ||
      header.find("'fortran_order': False") == std::string::npos)
    throw std::runtime_error(path.string() + ": expected " + descr + " in C order: " + header);
  NpyArrayOf<T> a;
  const std::size_t open = header.find('(', header.find("'shape'"));
  const std::size_t close = header.find(')', open);
  std::string dims = header.substr(open + 1, close - open - 1);
  std::size_t pos = 0;
  while (pos < dims.size()) {
    const std::size_t comma = dims.find(',', pos);
    const std::string part = dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (part.find_first_not_of(' ') != std::string::npos) a.shape.push_back(std::stoll(part));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  std::int64_t count = 1;
  for (auto d : a.shape) count *= d;
  const std::size_t data_at = offset + header_len;
  if (bytes.size() != data_at + static_cast<std::size_t>(count) * 4) throw std::runtime_error(path.string() + ": size mismatch");
  a.data.resize(static_cast<std::size_t>(count));
  std::memcpy(a.data.data(), bytes.data() + data_at, a.data.size() * 4);
  return a;
}

inline NpyArray read_npy_f32(const std::filesystem::path& path) { return read_npy<float>(path, "<f4"); }
inline NpyArrayOf<std::int32_t> read_npy_i32(const std::filesystem::path& path) {
  return read_npy<std::int32_t>(path, "<i4");
}

}  // namespace deepinfer::golden
