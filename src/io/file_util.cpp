// File helpers: bounded whole-file reads and atomic writes.
#include "io/file_util.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

#include "common/error.h"

namespace deepinfer::io {

std::string read_text_file(const std::filesystem::path& path, std::size_t max_bytes) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) throw_error("{}: no such file", path.string());
  if (!std::filesystem::is_regular_file(status)) throw_error("{}: not a regular file", path.string());
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw_error("{}: cannot read its size: {}", path.string(), ec.message());
  if (size > max_bytes) throw_error("{}: {} bytes, more than the {}-byte limit for this file", path.string(), size, max_bytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error("{}: cannot open: {}", path.string(), std::strerror(errno));
  std::string text(static_cast<std::size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::size_t>(in.gcount()) != size) throw_error("{}: short read", path.string());
  return text;
}

void write_file_atomically(const std::filesystem::path& path, std::span<const char> bytes) {
  const std::filesystem::path temp = path.string() + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) throw_error("{}: cannot create: {}", temp.string(), std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) throw_error("{}: write failed: {}", temp.string(), std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    const std::string reason = ec.message();
    std::filesystem::remove(temp, ec);
    throw_error("{}: cannot move into place: {}", path.string(), reason);
  }
}

}  // namespace deepinfer::io
