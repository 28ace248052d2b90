// libFuzzer target for the safetensors header parser. Input: a whole file. Checks: no crash, hang
// or stray exception (only deepinfer::Error may escape the parser); an accepted header tiles its
// data buffer exactly, and writing its tensors back out gives a file that parses to the same table.
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/error.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace {

using deepinfer::io::SafetensorsHeader;

void check_roundtrip(std::span<const std::uint8_t> file, const SafetensorsHeader& header) {
  std::uint64_t expected = 0;
  deepinfer::io::SafetensorsWriter writer;
  for (const auto& entry : header.entries) {
    if (entry.begin != expected) __builtin_trap();  // parser accepted a gap or an overlap
    expected = entry.end;
    const std::uint8_t* data = file.data() + header.data_offset + entry.begin;
    writer.add_raw(entry.name, entry.dtype_name, {entry.shape.dims().begin(), entry.shape.dims().end()},
                   {data, data + entry.nbytes()});
  }
  if (expected != header.data_size) __builtin_trap();
  for (const auto& [key, value] : header.metadata) writer.set_metadata(key, value);
  const auto again = deepinfer::io::parse_safetensors_header(writer.serialize(), "roundtrip");
  if (again.entries.size() != header.entries.size() || again.metadata != header.metadata) __builtin_trap();
  for (const auto& entry : header.entries) {
    const auto* other = again.find(entry.name);
    if (other == nullptr || other->dtype != entry.dtype || !(other->shape == entry.shape) || other->nbytes() != entry.nbytes())
      __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> file(data, size);
  try {
    const SafetensorsHeader header = deepinfer::io::parse_safetensors_header(file, "fuzz.safetensors");
    check_roundtrip(file, header);
  } catch (const deepinfer::Error&) {
    // Rejected input: the expected outcome for almost everything the fuzzer makes.
  }
  return 0;
}
