// BlockManager: see deepinfer/block_manager.h for the contract.
#include "deepinfer/block_manager.h"
#include "deepinfer/str_cat.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>

namespace deepinfer {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, int64_t num_state_slots)
    : num_blocks_(num_blocks), block_size_(block_size), num_state_slots_(num_state_slots) {
  if (num_blocks < 2 || num_blocks > INT32_MAX) {
    throw std::invalid_argument(cat("BlockManager: num_blocks must be in [2, 2^31) (block 0 is a ",
                                    "reserved sentinel), got ", num_blocks));
  }
  if (block_size < 1) {
    throw std::invalid_argument(cat("BlockManager: block_size must be >= 1, got ", block_size));
  }
  if (num_state_slots < 2 || num_state_slots > INT32_MAX) {
    throw std::invalid_argument(cat("BlockManager: num_state_slots must be in [2, 2^31) (slot 0 ",
                                    "is reserved for padding), got ", num_state_slots));
  }
  ref_counts_.assign(static_cast<size_t>(num_blocks), 0);
  free_blocks_.reserve(static_cast<size_t>(num_blocks - 1));
  for (int64_t b = num_blocks - 1; b >= 1; --b) free_blocks_.push_back(static_cast<int32_t>(b));
  free_slots_.reserve(static_cast<size_t>(num_state_slots - 1));
  for (int64_t s = num_state_slots - 1; s >= 1; --s) free_slots_.push_back(static_cast<int32_t>(s));
}

int64_t BlockManager::blocks_for(int64_t num_tokens) const {
  return (num_tokens + block_size_ - 1) / block_size_;
}

const BlockManager::Sequence& BlockManager::get(int64_t seq_id, const char* op) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) {
    throw std::invalid_argument(
        cat(op, ": unknown sequence id ", seq_id, " (never allocated or already freed)"));
  }
  return it->second;
}

int32_t BlockManager::pop_block() {
  int32_t b = free_blocks_.back();
  free_blocks_.pop_back();
  ref_counts_[b] = 1;
  return b;
}

void BlockManager::release_block(int32_t block) {
  if (ref_counts_[block] <= 0) {
    throw std::runtime_error(
        cat("free: over-release of block ", block, " (reference count already 0)"));
  }
  if (--ref_counts_[block] == 0) free_blocks_.push_back(block);
}

bool BlockManager::can_allocate(int64_t num_tokens) const {
  if (num_tokens < 1) return false;
  return blocks_for(num_tokens) + kReserveBlocks <= num_free_blocks() && !free_slots_.empty();
}

void BlockManager::allocate(int64_t seq_id, int64_t num_tokens) {
  if (has_sequence(seq_id)) {
    throw std::invalid_argument(cat("allocate: sequence id ", seq_id, " already exists"));
  }
  if (num_tokens < 1) {
    throw std::invalid_argument(cat("allocate: num_tokens must be >= 1, got ", num_tokens));
  }
  const int64_t need = blocks_for(num_tokens);
  if (need + kReserveBlocks > num_usable_blocks()) {
    throw std::invalid_argument(cat("allocate: sequence of ", num_tokens, " tokens needs ", need,
                                    " blocks, longer than the cache can ever hold (",
                                    num_usable_blocks(), " usable blocks, ", kReserveBlocks,
                                    " kept in reserve)"));
  }
  if (need + kReserveBlocks > num_free_blocks()) {
    throw std::runtime_error(cat("allocate: not enough free blocks for sequence ", seq_id, ": needs ",
                                 need, " + ", kReserveBlocks, " reserve, ", num_free_blocks(),
                                 " free"));
  }
  if (free_slots_.empty()) {
    throw std::runtime_error(cat("allocate: no free state slot for sequence ", seq_id));
  }
  // Both checks passed: take the blocks and the slot as one unit.
  Sequence seq;
  seq.num_tokens = num_tokens;
  seq.blocks.reserve(static_cast<size_t>(need));
  for (int64_t i = 0; i < need; ++i) seq.blocks.push_back(pop_block());
  seq.slot = free_slots_.back();
  free_slots_.pop_back();
  seqs_.emplace(seq_id, std::move(seq));
}

bool BlockManager::can_append(int64_t seq_id, int64_t num_new_tokens) const {
  const Sequence& seq = get(seq_id, "can_append");
  if (num_new_tokens < 0) return false;
  const int64_t need =
      blocks_for(seq.num_tokens + num_new_tokens) - static_cast<int64_t>(seq.blocks.size());
  return need <= num_free_blocks();
}

std::vector<int32_t> BlockManager::append(int64_t seq_id, int64_t num_new_tokens) {
  get(seq_id, "append");
  if (num_new_tokens < 0) {
    throw std::invalid_argument(
        cat("append: num_new_tokens must be >= 0, got ", num_new_tokens));
  }
  Sequence& seq = seqs_.at(seq_id);
  const int64_t need =
      blocks_for(seq.num_tokens + num_new_tokens) - static_cast<int64_t>(seq.blocks.size());
  if (need > num_free_blocks()) {
    throw std::runtime_error(cat("append: not enough free blocks for sequence ", seq_id,
                                 ": needs ", need, ", ", num_free_blocks(), " free"));
  }
  std::vector<int32_t> added;
  for (int64_t i = 0; i < need; ++i) {
    added.push_back(pop_block());
    seq.blocks.push_back(added.back());
  }
  seq.num_tokens += num_new_tokens;
  return added;
}

bool BlockManager::can_fork(int64_t parent_id) const {
  return can_fork(parent_id, get(parent_id, "can_fork").num_tokens);
}

bool BlockManager::can_fork(int64_t parent_id, int64_t num_tokens) const {
  const Sequence& parent = get(parent_id, "can_fork");
  if (num_tokens < 1 || num_tokens > parent.num_tokens) return false;
  const int64_t need = num_tokens % block_size_ != 0 ? 1 : 0;
  return need + kReserveBlocks <= num_free_blocks() && !free_slots_.empty();
}

ForkResult BlockManager::fork(int64_t parent_id, int64_t child_id) {
  return fork(parent_id, child_id, get(parent_id, "fork").num_tokens);
}

ForkResult BlockManager::fork(int64_t parent_id, int64_t child_id, int64_t num_tokens) {
  const Sequence& parent = get(parent_id, "fork");
  if (has_sequence(child_id)) {
    throw std::invalid_argument(cat("fork: child sequence id ", child_id, " already exists"));
  }
  if (num_tokens < 1 || num_tokens > parent.num_tokens) {
    throw std::invalid_argument(cat("fork: num_tokens must be in [1, ", parent.num_tokens,
                                    "] (the parent's tokens), got ", num_tokens));
  }
  if (!can_fork(parent_id, num_tokens)) {
    throw std::runtime_error(cat("fork: not enough free blocks or state slots to fork sequence ",
                                 parent_id, " (", num_free_blocks(), " free blocks, ",
                                 kReserveBlocks, " kept in reserve; ", num_free_state_slots(),
                                 " free state slots)"));
  }
  Sequence child;
  child.num_tokens = num_tokens;
  child.blocks.assign(parent.blocks.begin(), parent.blocks.begin() + blocks_for(num_tokens));
  ForkResult result;
  const bool partial = num_tokens % block_size_ != 0;
  const size_t shared = partial ? child.blocks.size() - 1 : child.blocks.size();
  for (size_t i = 0; i < shared; ++i) ++ref_counts_[child.blocks[i]];
  if (partial) {
    const int32_t src = child.blocks.back();
    const int32_t dst = pop_block();
    result.block_copy = std::make_pair(src, dst);
    child.blocks.back() = dst;
  }
  child.slot = free_slots_.back();
  free_slots_.pop_back();
  result.slot_copy = {parent.slot, child.slot};
  seqs_.emplace(child_id, std::move(child));
  return result;
}

void BlockManager::free(int64_t seq_id) {
  get(seq_id, "free");
  auto it = seqs_.find(seq_id);
  const Sequence& seq = it->second;
  for (auto b = seq.blocks.rbegin(); b != seq.blocks.rend(); ++b) release_block(*b);
  free_slots_.push_back(seq.slot);
  seqs_.erase(it);
}

const std::vector<int32_t>& BlockManager::block_table(int64_t seq_id) const {
  return get(seq_id, "block_table").blocks;
}

SequenceView BlockManager::view(int64_t seq_id) const {
  const Sequence& seq = get(seq_id, "view");
  return {seq.blocks, seq.slot, seq.num_tokens};
}

int32_t BlockManager::state_slot(int64_t seq_id) const { return get(seq_id, "state_slot").slot; }

int64_t BlockManager::num_tokens(int64_t seq_id) const {
  return get(seq_id, "num_tokens").num_tokens;
}

int32_t BlockManager::ref_count(int64_t block_id) const {
  if (block_id < 0 || block_id >= num_blocks_) {
    throw std::invalid_argument(
        cat("ref_count: block id ", block_id, " outside [0, ", num_blocks_, ")"));
  }
  return ref_counts_[static_cast<size_t>(block_id)];
}

double BlockManager::usage() const {
  return static_cast<double>(num_usable_blocks() - num_free_blocks()) /
         static_cast<double>(num_usable_blocks());
}

void BlockManager::check_integrity() const {
  auto fail = [](const std::string& msg) { throw std::runtime_error("check_integrity: " + msg); };
  std::vector<int64_t> owners(static_cast<size_t>(num_blocks_), 0);
  std::vector<int64_t> slot_owner(static_cast<size_t>(num_state_slots_), -1);
  std::vector<char> slot_owned(static_cast<size_t>(num_state_slots_), 0);
  for (const auto& [id, seq] : seqs_) {
    if (static_cast<int64_t>(seq.blocks.size()) != blocks_for(seq.num_tokens)) {
      fail(cat("sequence ", id, " has ", seq.blocks.size(), " blocks for ", seq.num_tokens,
               " tokens"));
    }
    for (int32_t b : seq.blocks) {
      if (b == 0) fail(cat("sentinel block 0 is owned by sequence ", id));
      if (b < 0 || b >= num_blocks_) fail(cat("sequence ", id, " owns out-of-range block ", b));
      ++owners[b];
    }
    if (seq.slot <= 0 || seq.slot >= num_state_slots_) {
      fail(cat("sequence ", id, " owns invalid state slot ", seq.slot));
    }
    if (slot_owned[seq.slot]) {
      fail(cat("state slot ", seq.slot, " owned twice (sequences ", slot_owner[seq.slot], " and ",
               id, ")"));
    }
    slot_owned[seq.slot] = 1;
    slot_owner[seq.slot] = id;
  }
  if (ref_counts_[0] != 0) fail("sentinel block 0 has a nonzero reference count");
  int64_t used = 0;
  for (int64_t b = 1; b < num_blocks_; ++b) {
    if (ref_counts_[b] < 0) fail(cat("block ", b, " has negative reference count"));
    if (ref_counts_[b] != owners[b]) {
      fail(cat("block ", b, " reference count ", ref_counts_[b], " != ", owners[b],
               " tables containing it"));
    }
    if (ref_counts_[b] > 0) ++used;
  }
  std::vector<char> in_free(static_cast<size_t>(num_blocks_), 0);
  for (int32_t b : free_blocks_) {
    if (b <= 0 || b >= num_blocks_) fail(cat("free list holds invalid block ", b));
    if (in_free[b]) fail(cat("block ", b, " appears twice in the free list"));
    in_free[b] = 1;
    if (ref_counts_[b] > 0) fail(cat("free block ", b, " has reference count ", ref_counts_[b]));
  }
  if (used + num_free_blocks() != num_usable_blocks()) {
    fail(cat("free (", num_free_blocks(), ") + used (", used, ") != usable blocks (",
             num_usable_blocks(), ")"));
  }
  std::vector<char> slot_free(static_cast<size_t>(num_state_slots_), 0);
  for (int32_t s : free_slots_) {
    if (s <= 0 || s >= num_state_slots_) fail(cat("free slot list holds invalid slot ", s));
    if (slot_free[s]) fail(cat("state slot ", s, " appears twice in the free list"));
    if (slot_owned[s]) fail(cat("state slot ", s, " is both free and owned"));
    slot_free[s] = 1;
  }
  if (num_free_state_slots() + num_sequences() != num_state_slots_ - 1) {
    fail(cat("free state slots (", num_free_state_slots(), ") + owned (", num_sequences(),
             ") != usable slots (", num_state_slots_ - 1, ")"));
  }
}

}  // namespace deepinfer
