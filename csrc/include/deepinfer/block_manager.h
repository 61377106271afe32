// deepinfer/block_manager.h — paged KV blocks and per-sequence state slots, allocated as one unit.
//
// Contract (architecture.md §6, seed §3.5-3.6):
//  * Block 0 is a sentinel no sequence ever owns: usable blocks are 1..num_blocks-1, so padding
//    lanes can point at block 0. State slot 0 is reserved the same way (slots 1..num_state_slots-1).
//  * A sequence owns a block table (ceil(num_tokens / block_size) block ids) and one state slot.
//    allocate() takes both or neither.
//  * Reserve: allocate() and fork() refuse any request that would leave fewer than
//    kReserveBlocks (1) free blocks, so a running sequence's decode append can always get a block.
//    append() may use the reserve.
//  * fork() shares every full block of the parent by reference count; the partially filled last
//    block (if any) is copied into a fresh block for the child. The child gets a new state slot.
//    The caller (runtime) performs both copies that fork() returns. fork(parent, child,
//    num_tokens) forks only the first num_tokens tokens (1 <= num_tokens <= the parent's): a
//    table that reaches past the valid KV (decode look-ahead room) is not shared beyond it.
//  * Free lists are LIFO stacks. Initially the stack top is block 1 (then 2, 3, ...); free()
//    pushes a sequence's blocks last-to-first, so its first block is the next one handed out.
//    The same rule holds for state slots. A Python model (tests/csrc/block_manager_model.py)
//    follows the same rules exactly.
//  * Errors: std::invalid_argument for a caller mistake (unknown / existing id, bad sizes, a
//    sequence that can never fit); std::runtime_error when capacity runs out or an internal
//    invariant breaks. Messages name the contract that was broken.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace deepinfer {

// A live sequence's table, slot and token count, from one lookup (scheduler hot path). The
// reference is valid until the sequence is freed.
struct SequenceView {
  const std::vector<int32_t>& blocks;
  int32_t slot;
  int64_t num_tokens;
};

struct ForkResult {
  // (src_block, dst_block): copy the parent's partially filled last block; empty if it was full.
  std::optional<std::pair<int32_t, int32_t>> block_copy;
  // (src_slot, dst_slot): copy the parent's state slot into the child's.
  std::pair<int32_t, int32_t> slot_copy;
};

class BlockManager {
 public:
  static constexpr int64_t kReserveBlocks = 1;

  BlockManager(int64_t num_blocks, int64_t block_size, int64_t num_state_slots);

  // Whether allocate() of a new sequence of num_tokens tokens would succeed now.
  bool can_allocate(int64_t num_tokens) const;
  // Allocates ceil(num_tokens / block_size) blocks and one state slot for a new sequence.
  void allocate(int64_t seq_id, int64_t num_tokens);

  // Whether append(seq_id, num_new_tokens) would succeed now (may use the reserve block).
  bool can_append(int64_t seq_id, int64_t num_new_tokens) const;
  // Grows the sequence by num_new_tokens; returns the blocks added to its table (maybe none).
  std::vector<int32_t> append(int64_t seq_id, int64_t num_new_tokens);

  // Whether fork(parent, <new id>[, num_tokens]) would succeed now.
  bool can_fork(int64_t parent_id) const;
  bool can_fork(int64_t parent_id, int64_t num_tokens) const;
  ForkResult fork(int64_t parent_id, int64_t child_id);
  ForkResult fork(int64_t parent_id, int64_t child_id, int64_t num_tokens);

  // Releases the sequence's blocks (by reference count) and its state slot.
  void free(int64_t seq_id);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_usable_blocks() const { return num_blocks_ - 1; }
  int64_t block_size() const { return block_size_; }
  int64_t num_state_slots() const { return num_state_slots_; }
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_blocks_.size()); }
  int64_t num_free_state_slots() const { return static_cast<int64_t>(free_slots_.size()); }
  int64_t num_sequences() const { return static_cast<int64_t>(seqs_.size()); }
  bool has_sequence(int64_t seq_id) const { return seqs_.count(seq_id) != 0; }
  const std::vector<int32_t>& block_table(int64_t seq_id) const;
  SequenceView view(int64_t seq_id) const;
  int32_t state_slot(int64_t seq_id) const;
  int64_t num_tokens(int64_t seq_id) const;
  int32_t ref_count(int64_t block_id) const;
  // Used fraction of the usable blocks (block 0 excluded), in [0, 1].
  double usage() const;
  // Recomputes every invariant from the tables; throws std::runtime_error naming the first broken.
  void check_integrity() const;

 private:
  struct Sequence {
    std::vector<int32_t> blocks;
    int32_t slot = 0;
    int64_t num_tokens = 0;
  };

  int64_t blocks_for(int64_t num_tokens) const;
  const Sequence& get(int64_t seq_id, const char* op) const;
  int32_t pop_block();
  void release_block(int32_t block);

  int64_t num_blocks_;
  int64_t block_size_;
  int64_t num_state_slots_;
  std::vector<int32_t> ref_counts_;   // indexed by block id; [0] stays 0
  std::vector<int32_t> free_blocks_;  // LIFO stack, back() is handed out next
  std::vector<int32_t> free_slots_;   // LIFO stack, back() is handed out next
  std::unordered_map<int64_t, Sequence> seqs_;
};

}  // namespace deepinfer
