// Graph capture dispatch and the staging buffer (layout, host/device views, uploads). Backend
// specifics come through GraphBackend; the CPU path (shared memory) and the synchronous fallback
// live here.
#include "ops/graph.h"

#include <algorithm>
#include <bit>

#include "common/error.h"

namespace deepinfer::ops {
namespace {

GraphBackend* graph_backend(Backend& backend) { return dynamic_cast<GraphBackend*>(&backend); }

GraphBackend& require_graphs(Backend& backend, const char* what) {
  GraphBackend* g = graph_backend(backend);
  DI_CHECK(g != nullptr, "{}: the {} backend cannot capture graphs (check supports_graphs() first)", what,
           backend.name());
  return *g;
}

}  // namespace

void Graph::replay() {
  DI_CHECK(exec_ != nullptr, "Graph::replay: empty graph (not captured)");
  exec_->replay();
}

std::size_t Graph::num_nodes() const { return exec_ ? exec_->num_nodes() : 0; }

bool supports_graphs(Backend& backend) { return graph_backend(backend) != nullptr; }

bool is_capturing(Backend& backend) {
  GraphBackend* g = graph_backend(backend);
  return g != nullptr && g->capturing();
}

void begin_capture(Backend& backend) { require_graphs(backend, "begin_capture").begin_capture(); }

Graph end_capture(Backend& backend) { return require_graphs(backend, "end_capture").end_capture(); }

void abort_capture(Backend& backend) noexcept {
  if (GraphBackend* g = graph_backend(backend)) g->abort_capture();
}

Graph capture_graph(Backend& backend, const std::function<void()>& body) {
  GraphBackend& g = require_graphs(backend, "capture_graph");
  g.begin_capture();
  try {
    body();
  } catch (...) {
    g.abort_capture();
    throw;
  }
  return g.end_capture();
}

const void* captured_memory(Backend& backend) {
  const GraphBackend* g = graph_backend(backend);
  return g != nullptr ? g->captured_memory() : nullptr;
}

// ---- staging layout ---------------------------------------------------------------------------------
std::size_t StagingLayout::add(std::string_view name, const Shape& shape, DType dtype, std::size_t align) {
  DI_CHECK(!name.empty(), "StagingLayout::add: a slice needs a name");
  DI_CHECK(align > 0 && std::has_single_bit(align) && align <= 4096,
           "StagingLayout::add: slice '{}' alignment {} must be a power of two <= 4096", name, align);
  for (const Slice& s : slices_) DI_CHECK(s.name != name, "StagingLayout::add: slice '{}' added twice", name);
  for (int i = 0; i < shape.ndim(); ++i)
    DI_CHECK(shape[i] >= 0, "StagingLayout::add: slice '{}' has a negative extent in {}", name, shape);
  Slice s;
  s.name = std::string(name);
  s.shape = shape;
  s.dtype = dtype;
  s.offset = (bytes_ + align - 1) / align * align;
  s.bytes = dtype_bytes(dtype, shape.numel());
  bytes_ = s.offset + s.bytes;
  slices_.push_back(std::move(s));
  return slices_.size() - 1;
}

std::size_t StagingLayout::index_of(std::string_view name) const {
  for (std::size_t i = 0; i < slices_.size(); ++i)
    if (slices_[i].name == name) return i;
  throw_error("staging: no slice named '{}' ({} slices laid out)", name, slices_.size());
}

const StagingLayout::Slice& StagingLayout::slice(std::string_view name) const { return slices_[index_of(name)]; }

// ---- staging buffer ---------------------------------------------------------------------------------
StagingBuffer::StagingBuffer(Backend& backend, StagingLayout layout, int host_slots)
    : backend_(backend), layout_(std::move(layout)) {
  DI_CHECK(host_slots >= 1 && host_slots <= 8, "StagingBuffer: {} host slots (1..8)", host_slots);
  // One byte at least, so every view has an address even for an empty layout.
  const auto bytes = static_cast<std::int64_t>(std::max<std::size_t>(layout_.bytes(), 1));
  if (backend.device().is_cpu()) {
    device_ = backend.empty(Shape{bytes}, DType::kU8);  // host memory: host and device views coincide
    return;
  }
  device_ = backend.empty(Shape{bytes}, DType::kU8);
  if (GraphBackend* g = graph_backend(backend)) {
    slots_ = host_slots;
    uploader_ = g->make_uploader(static_cast<std::size_t>(bytes), slots_);
  } else {
    plain_host_ = Tensor::empty(Shape{bytes}, DType::kU8);
  }
}

StagingBuffer::~StagingBuffer() = default;

void* StagingBuffer::host_base() {
  if (uploader_ != nullptr) {
    if (pending_wait_) {
      uploader_->wait(slot_);
      pending_wait_ = false;
    }
    return uploader_->host_slot(slot_);
  }
  return plain_host_.defined() && plain_host_.numel() > 0 ? plain_host_.raw_data() : device_.raw_data();
}

Tensor StagingBuffer::view(void* base, std::size_t index, Device device) const {
  DI_CHECK(index < layout_.slices().size(), "staging: slice index {} of {}", index, layout_.slices().size());
  const StagingLayout::Slice& s = layout_.slices()[index];
  return Tensor::view_of(static_cast<std::uint8_t*>(base) + s.offset, s.shape, s.dtype, nullptr, device);
}

Tensor StagingBuffer::host(std::size_t index) { return view(host_base(), index, Device::cpu()); }
Tensor StagingBuffer::host(std::string_view name) { return host(layout_.index_of(name)); }

Tensor StagingBuffer::device(std::size_t index) const {
  return view(const_cast<void*>(device_.raw_data()), index, device_.device());
}
Tensor StagingBuffer::device(std::string_view name) const { return device(layout_.index_of(name)); }

void StagingBuffer::upload() {
  if (layout_.bytes() == 0 || backend_.device().is_cpu()) return;
  if (uploader_ != nullptr) {
    uploader_->upload(slot_, layout_.bytes(), device_.raw_data());
    slot_ = (slot_ + 1) % slots_;
    pending_wait_ = true;
    return;
  }
  Tensor src = plain_host_.narrow(0, 0, static_cast<std::int64_t>(layout_.bytes()));
  Tensor dst = device_.narrow(0, 0, static_cast<std::int64_t>(layout_.bytes()));
  backend_.copy(src, dst);
}

}  // namespace deepinfer::ops
