// A read-only memory mapping of a whole file (RAII). Shared by the tensor views cut from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>

namespace deepinfer::io {

class MappedFile {
 public:
  // Maps `path` read-only. Throws deepinfer::Error naming the file if it cannot be opened or mapped.
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  MappedFile(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace deepinfer::io
