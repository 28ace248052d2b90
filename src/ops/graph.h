// Captured op sequences (CUDA graphs) and step-input staging. A decode step is hundreds of small
// kernels; capturing them once per batch bucket and replaying the graph costs one launch instead of
// one per op. The staging buffer moves a step's metadata (ids, positions, index lists, page tables)
// to the device in one async copy before the launch, eager or replayed.
//
// How a graph sees new inputs: a graph replays the kernels exactly as captured — same shapes, same
// device pointers, same host scalars baked into kernel arguments. Everything that changes between
// replays must therefore live in device memory at a fixed address (a StagingBuffer slice, a KV
// pool, a persistent activation buffer) whose contents the caller rewrites before each replay;
// outputs are read from the tensors the captured ops wrote to. Memory the captured ops use (their
// inputs, outputs, Workspace blocks, the backend's scratch) must stay allocated for the graph's
// lifetime: the backend keeps its own scratch alive, Workspace::retain() and Graph::keep_alive()
// cover the rest.
//
// Typical use (batch bucket B, after one eager warm-up step of the same shapes sized every
// workspace and scratch buffer):
//   if (ops::supports_graphs(backend)) graph = ops::capture_graph(backend, [&] { forward(B); });
//   ... each step: write staging.host(...); staging.upload(); graph.replay(); read outputs.
// While capturing, calls that cannot be captured (device allocation, host copies, synchronize,
// scratch growth) throw deepinfer::Error naming the op and the capture is abandoned cleanly.
// Threads: a capture records everything enqueued on the backend's stream, so no other thread may
// use the backend between begin_capture and end_capture; replays may come from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ops/backend.h"

namespace deepinfer::ops {

namespace detail {
// A backend's instantiated graph (the CUDA one holds a cudaGraphExec_t and its stream).
class GraphExec {
 public:
  virtual ~GraphExec() = default;
  virtual void replay() = 0;
  virtual std::size_t num_nodes() const = 0;
};

// Pinned host slots + their async copies to device memory (one per StagingBuffer).
class HostUploader {
 public:
  virtual ~HostUploader() = default;
  // Page-locked host memory of slot `slot` (bytes as given to make_uploader).
  virtual void* host_slot(int slot) = 0;
  // Enqueues host slot -> device copy of `bytes` on the backend's stream (returns at once).
  virtual void upload(int slot, std::size_t bytes, void* device) = 0;
  // Blocks until the last upload from `slot` has been read by the device (slot reusable).
  virtual void wait(int slot) = 0;
};
}  // namespace detail

// One captured, instantiated op sequence. Move-only; destroy it before its backend.
class Graph {
 public:
  Graph() = default;
  explicit Graph(std::unique_ptr<detail::GraphExec> exec) : exec_(std::move(exec)) {}
  // The instantiated graph goes first (the CUDA one waits for its replays), then the memory it used.
  ~Graph() { exec_.reset(); }
  Graph(Graph&&) noexcept = default;
  Graph& operator=(Graph&&) noexcept = default;  // exec_ (declared first) is replaced first

  bool valid() const { return exec_ != nullptr; }
  // Enqueues the whole sequence on the backend's stream and returns without waiting (faults the
  // kernels report surface at the backend's next synchronize(), as for eager ops).
  void replay();
  // Kernel/copy nodes in the graph (for tests and logs).
  std::size_t num_nodes() const;
  // Keeps `memory` (any owner: a Tensor's buffer, Workspace::retain()) alive as long as the graph.
  void keep_alive(std::shared_ptr<const void> memory) { keep_.push_back(std::move(memory)); }

 private:
  std::unique_ptr<detail::GraphExec> exec_;
  std::vector<std::shared_ptr<const void>> keep_;
};

// What a backend implements to support graphs and async staging (the CUDA backend does; the CPU
// backend does not). Callers use the free functions below instead of this interface.
class GraphBackend {
 public:
  virtual ~GraphBackend() = default;
  virtual void begin_capture() = 0;
  virtual Graph end_capture() = 0;
  // Ends a capture that failed (no throw; the stream is usable again afterwards).
  virtual void abort_capture() noexcept = 0;
  virtual bool capturing() const = 0;
  virtual std::unique_ptr<detail::HostUploader> make_uploader(std::size_t bytes, int slots) = 0;
  // The backend-owned memory every capture bakes into its kernels (the CUDA scratch buffer); it
  // changes when that memory is replaced (growth). A graph captured under another value holds the
  // old memory alive (end_capture keeps it) and is worth dropping. Null: no such memory.
  virtual const void* captured_memory() const { return nullptr; }
};

// ---- graphs ----------------------------------------------------------------------------------------
// Whether `backend` can capture graphs (branch once: without graphs, run the ops eagerly).
bool supports_graphs(Backend& backend);
// Whether `backend` is capturing now (false when it cannot capture at all).
bool is_capturing(Backend& backend);
// Starts recording this thread's ops on `backend` instead of running them. Throws when the backend
// has no graphs or is capturing already.
void begin_capture(Backend& backend);
// Stops recording and instantiates the graph (uploaded to the device, ready to replay).
Graph end_capture(Backend& backend);
// Abandons a capture after an error (no-op when none is active).
void abort_capture(Backend& backend) noexcept;
// begin_capture, body(), end_capture; an exception from body aborts the capture and propagates.
Graph capture_graph(Backend& backend, const std::function<void()>& body);
// GraphBackend::captured_memory of `backend` (null when it cannot capture).
const void* captured_memory(Backend& backend);

// ---- step-input staging ------------------------------------------------------------------------------
// Named, aligned slices of one staging buffer. Capacities are the bucket's maxima: a step may use
// a prefix of each slice (Tensor::narrow) and the graph of that bucket reads the whole slice.
class StagingLayout {
 public:
  struct Slice {
    std::string name;
    Shape shape;
    DType dtype = DType::kI32;
    std::size_t offset = 0;  // bytes from the buffer's start
    std::size_t bytes = 0;
  };
  // Adds a slice of `shape` (contiguous) at an offset aligned to `align` bytes (a power of two);
  // returns its index. Names must be unique and non-empty.
  std::size_t add(std::string_view name, const Shape& shape, DType dtype, std::size_t align = 256);
  std::size_t bytes() const { return bytes_; }
  const std::vector<Slice>& slices() const { return slices_; }
  // The slice called `name` (throws naming it when absent).
  const Slice& slice(std::string_view name) const;
  std::size_t index_of(std::string_view name) const;

 private:
  std::vector<Slice> slices_;
  std::size_t bytes_ = 0;
};

// A pinned host buffer (`host_slots` of them, so the host can fill step N+1 while step N's copy is
// in flight) and one device buffer at a fixed address, laid out by a StagingLayout. upload() is a
// single async copy of the whole laid-out range on the backend's stream; device views stay valid
// (same address) for the buffer's lifetime, which is what captured graphs read. On the CPU backend
// host and device views are the same memory and upload() copies nothing. On a device backend
// without async staging (no GraphBackend) upload() is a plain synchronous copy.
class StagingBuffer {
 public:
  StagingBuffer(Backend& backend, StagingLayout layout, int host_slots = 2);
  ~StagingBuffer();
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  const StagingLayout& layout() const { return layout_; }
  // The writable host view of a slice in the current slot. The first call after an upload() may
  // wait until the device has read this slot's previous contents (two uploads ago with 2 slots).
  // A slot keeps what was written into it before, so write every field a step uses. Host views
  // are valid until the next upload().
  Tensor host(std::string_view name);
  Tensor host(std::size_t index);
  // The slice's device view (fixed address; what ops and graphs read).
  Tensor device(std::string_view name) const;
  Tensor device(std::size_t index) const;
  // Enqueues the copy of the current slot to the device buffer and moves to the next slot. Call it
  // outside graph capture, before the ops (or the replay) that read the step's inputs.
  void upload();
  // Bytes copied by one upload().
  std::size_t bytes() const { return layout_.bytes(); }

 private:
  Backend& backend_;
  StagingLayout layout_;
  std::unique_ptr<detail::HostUploader> uploader_;  // async path (GraphBackend)
  Tensor device_;                                    // u8 [bytes] (the host buffer on the CPU)
  Tensor plain_host_;                                // sync fallback's host buffer
  int slots_ = 1;
  int slot_ = 0;
  bool pending_wait_ = false;

  void* host_base();
  Tensor view(void* base, std::size_t index, Device device) const;
};

}  // namespace deepinfer::ops
