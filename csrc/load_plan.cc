// Load plan builders: see deepinfer/load_plan.h for the segment format and layouts.
#include "deepinfer/load_plan.h"
#include "deepinfer/str_cat.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace deepinfer {
namespace {

void put(int32_t* out, int64_t index, int64_t block, int64_t begin, int64_t end, int64_t dst) {
  int32_t* s = out + index * kSegmentInts;
  s[0] = static_cast<int32_t>(block);
  s[1] = static_cast<int32_t>(begin);
  s[2] = static_cast<int32_t>(end);
  s[3] = static_cast<int32_t>(dst);
}

void check_capacity(const char* op, int64_t needed, int64_t capacity) {
  if (needed > capacity) {
    throw std::invalid_argument(cat(op, ": output buffer holds ", capacity,
                                    " segments but the plan needs ", needed));
  }
}

}  // namespace

int64_t max_paged_segments(int64_t view_len, int64_t block_size) {
  if (view_len < 0 || block_size < 1) {
    throw std::invalid_argument(cat("max_paged_segments: need view_len >= 0 and block_size >= 1, ",
                                    "got ", view_len, ", ", block_size));
  }
  return (view_len + block_size - 1) / block_size + 1;
}

int64_t build_paged_plan(const int32_t* block_table, int64_t table_len, int64_t block_size,
                         int64_t num_tokens, int64_t view_len, int32_t* out, int64_t capacity) {
  if (block_size < 1) {
    throw std::invalid_argument(cat("paged plan: block_size must be >= 1, got ", block_size));
  }
  if (num_tokens < 0 || view_len < 0 || view_len > INT32_MAX) {
    throw std::invalid_argument(cat("paged plan: need num_tokens >= 0 and 0 <= view_len < 2^31, ",
                                    "got ", num_tokens, ", ", view_len));
  }
  const int64_t filled = std::min(num_tokens, view_len);
  const int64_t blocks = (filled + block_size - 1) / block_size;
  if (blocks > table_len) {
    throw std::invalid_argument(cat("paged plan: ", filled, " tokens need ", blocks,
                                    " blocks but the block table has ", table_len));
  }
  for (int64_t i = 0; i < blocks; ++i) {
    if (block_table[i] < 0) {
      throw std::invalid_argument(
          cat("paged plan: block table entry ", i, " is negative (", block_table[i], ")"));
    }
  }
  const int64_t count = blocks + (filled < view_len ? 1 : 0);
  check_capacity("paged plan", count, capacity);
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t begin = i * block_size;
    const int64_t end = std::min(begin + block_size, filled);
    put(out, i, block_table[i], 0, end - begin, begin);
  }
  if (filled < view_len) put(out, blocks, kZeroFillBlock, 0, view_len - filled, filled);
  return count;
}

int64_t build_ring_plan(int32_t ring_block_id, int64_t window, int64_t num_tokens, int32_t* out,
                        int64_t capacity) {
  if (window < 1 || window > INT32_MAX) {
    throw std::invalid_argument(cat("ring plan: window must be in [1, 2^31), got ", window));
  }
  if (num_tokens < 0) {
    throw std::invalid_argument(cat("ring plan: num_tokens must be >= 0, got ", num_tokens));
  }
  if (ring_block_id < 0) {
    throw std::invalid_argument(cat("ring plan: ring_block_id must be >= 0, got ", ring_block_id));
  }
  if (num_tokens < window) {  // never wrapped: tokens in slots [0, n), zeros after
    const int64_t count = (num_tokens > 0 ? 1 : 0) + 1;
    check_capacity("ring plan", count, capacity);
    int64_t i = 0;
    if (num_tokens > 0) put(out, i++, ring_block_id, 0, num_tokens, 0);
    put(out, i++, kZeroFillBlock, 0, window - num_tokens, num_tokens);
    return i;
  }
  const int64_t oldest = num_tokens % window;  // slot of token num_tokens - window
  const int64_t count = oldest == 0 ? 1 : 2;
  check_capacity("ring plan", count, capacity);
  put(out, 0, ring_block_id, oldest, window, 0);
  if (oldest != 0) put(out, 1, ring_block_id, 0, oldest, window - oldest);
  return count;
}

void validate_segments(const int32_t* segments, int64_t num_segments, int64_t view_len,
                       int64_t block_size) {
  if (num_segments < 0 || view_len < 0 || block_size < 1) {
    throw std::invalid_argument(cat("validate_segments: need num_segments >= 0, view_len >= 0, ",
                                    "block_size >= 1, got ", num_segments, ", ", view_len, ", ",
                                    block_size));
  }
  std::vector<std::pair<int64_t, int64_t>> ranges;  // (dst_begin, dst_end)
  ranges.reserve(static_cast<size_t>(num_segments));
  for (int64_t i = 0; i < num_segments; ++i) {
    const int32_t* s = segments + i * kSegmentInts;
    const int64_t block = s[0], begin = s[1], end = s[2], dst = s[3];
    if (block < kZeroFillBlock) {
      throw std::invalid_argument(cat("segment ", i, ": src_block_id ", block,
                                      " is neither a block id nor -1 (zero-fill)"));
    }
    if (begin < 0 || end <= begin) {
      throw std::invalid_argument(
          cat("segment ", i, ": source range [", begin, ", ", end, ") is empty or negative"));
    }
    if (block == kZeroFillBlock && begin != 0) {
      throw std::invalid_argument(cat("segment ", i, ": zero-fill segment must have src_begin 0"));
    }
    if (block != kZeroFillBlock && end > block_size) {
      throw std::invalid_argument(cat("segment ", i, ": source range [", begin, ", ", end,
                                      ") runs past the block (", block_size, " rows)"));
    }
    if (dst < 0 || dst + (end - begin) > view_len) {
      throw std::invalid_argument(cat("segment ", i, ": destination [", dst, ", ",
                                      dst + (end - begin), ") outside the view [0, ", view_len,
                                      ")"));
    }
    ranges.emplace_back(dst, dst + (end - begin));
  }
  std::sort(ranges.begin(), ranges.end());
  int64_t covered = 0;
  for (const auto& [b, e] : ranges) {
    if (b < covered) {
      throw std::invalid_argument(cat("destination overlap at row ", b, " (rows up to ", covered,
                                      " already covered)"));
    }
    if (b > covered) {
      throw std::invalid_argument(cat("destination gap: rows [", covered, ", ", b,
                                      ") not covered"));
    }
    covered = e;
  }
  if (covered != view_len) {
    throw std::invalid_argument(
        cat("destination gap: rows [", covered, ", ", view_len, ") not covered"));
  }
}

}  // namespace deepinfer
