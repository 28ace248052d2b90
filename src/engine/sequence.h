// A sequence: the unit the scheduler batches (a request with n > 1 has n of them). Holds the
// tokens and everything the cache knows about them: computed length, page table, state slot,
// pending snapshot restore, speculative rollback, prefix-cache registration progress.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/model_runner.h"

namespace deepinfer::engine {

// WAITING -> RUNNING -> (PREEMPTED -> RUNNING)* -> finished. A finished or aborted sequence
// leaves the scheduler at once (its FinishReason goes out in the engine's step output).
enum class SeqStatus : std::uint8_t {
  kWaiting,    // queued, never ran (or a forked n > 1 sibling); holds no state slot
  kRunning,    // admitted: holds a state slot and the pages of its computed tokens
  kPreempted,  // queued again after preemption; recomputes (or prefix-matches) its tokens
};

enum class FinishReason : std::uint8_t { kNone, kStop, kLength, kAbort, kError };
std::string_view to_string(FinishReason reason);

struct Sequence {
  SeqId id = 0;
  std::uint64_t arrival = 0;  // FIFO key (ties by id); kept across preemption
  std::vector<std::int32_t> tokens;  // prompt followed by committed output
  std::int32_t prompt_len = 0;
  std::int32_t max_len = 0;          // the engine finishes the sequence at this length
  std::uint64_t cache_key = 0;       // extra prefix-cache key (salt)
  SeqStatus status = SeqStatus::kWaiting;
  std::int32_t num_preemptions = 0;

  // Cache state. tokens[0, num_computed) are absorbed by the model; pages cover them.
  std::int32_t num_computed = 0;
  std::vector<std::int32_t> pages;
  std::int32_t state_slot = -1;
  bool state_valid = false;          // the slot holds this sequence's state after num_computed (+ rollback)
  std::int32_t restore_snapshot = -1;  // reference held until the restoring step commits
  std::int32_t pending_rollback = 0;   // rejected draft tokens the next step must un-absorb
  std::int32_t pending_save = -1;      // snapshot slot the in-flight step writes (reference held)
  std::int32_t num_cached_tokens = 0;  // tokens reused from the prefix cache at first admission

  // Prefix-cache registration: pages [0, registered_pages) are in the cache tree (or matched
  // from it); cache_node is the tree node of the last of them.
  std::vector<std::uint64_t> page_hashes;
  std::int32_t registered_pages = 0;
  std::int32_t cache_node = -1;
  bool registration_stopped = false;

  std::vector<std::int32_t> drafts;  // speculative tokens to verify in the next step

  // n > 1: siblings wait on their leader until it has computed the shared prompt pages up to
  // fork_boundary (and snapshotted the state there), then take references to them.
  SeqId fork_leader = 0;
  std::int32_t fork_boundary = 0;
  std::vector<SeqId> fork_waiters;  // on the leader

  std::int32_t num_known_remaining() const { return static_cast<std::int32_t>(tokens.size()) - num_computed; }
  std::int32_t num_output() const { return static_cast<std::int32_t>(tokens.size()) - prompt_len; }
};

}  // namespace deepinfer::engine
