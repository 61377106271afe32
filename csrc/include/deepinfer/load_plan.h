// deepinfer/load_plan.h — host-side load plans for the paged / ring cache load kernel (seed §3.8).
//
// A plan is a list of segments, each four int32 (src_block_id, src_begin, src_end, dst_offset):
// copy tokens [src_begin, src_end) of block src_block_id to destination rows
// [dst_offset, dst_offset + src_end - src_begin). src_block_id == -1 means zero-fill: then
// src_begin is 0 and src_end is the number of rows to zero (it may exceed a block).
// Segments are written in increasing dst_offset order and cover [0, view_len) exactly once.
//
// Paged layout: logical token t of a sequence lives in block table[t / block_size] at offset
// t % block_size. The view is rows [0, view_len): tokens [0, min(num_tokens, view_len)) from the
// table (one segment per block touched), then one zero-fill segment for never-written rows.
//
// Ring layout: a circular window of `window` slots held in block ring_block_id; token p lives in
// slot p % window. The view (view_len == window) lists the last min(num_tokens, window) tokens
// oldest-first, so a wrapped ring gives two segments; when num_tokens < window, the never-written
// slots become one zero-fill segment at the end.
//
// All functions throw std::invalid_argument with a message naming the broken contract.
#pragma once

#include <cstdint>

namespace deepinfer {

constexpr int32_t kZeroFillBlock = -1;
constexpr int64_t kSegmentInts = 4;
constexpr int64_t kMaxRingSegments = 2;

// Upper bound on the segments of a paged plan with this view length.
int64_t max_paged_segments(int64_t view_len, int64_t block_size);

// Writes the paged plan into out (capacity segments, 4 int32 each); returns the segment count.
int64_t build_paged_plan(const int32_t* block_table, int64_t table_len, int64_t block_size,
                         int64_t num_tokens, int64_t view_len, int32_t* out, int64_t capacity);

// Writes the ring plan (view_len == window) into out; returns the segment count (<= 2).
int64_t build_ring_plan(int32_t ring_block_id, int64_t window, int64_t num_tokens, int32_t* out,
                        int64_t capacity);

// Checks a plan: segments well formed, source ranges inside a block of block_size rows (ring:
// block_size == window), destination coverage exactly [0, view_len) with no overlap and no gap.
void validate_segments(const int32_t* segments, int64_t num_segments, int64_t view_len,
                       int64_t block_size);

}  // namespace deepinfer
