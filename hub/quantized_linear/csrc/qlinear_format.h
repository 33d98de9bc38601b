// The packed weight formats: GGML's Q8_0 and Q4_1 blocks, byte for byte, so that a block read
// from a GGUF file and one packed here are the same bytes. A packed weight is a uint8 tensor of
// shape (out_features, in_features / 32 * block bytes): row o holds the blocks of weight row o.
#pragma once
#include <cstdint>

namespace kx {

constexpr int64_t kQBlock = 32;  // weights per block, along in_features

enum QFormat : int { kQ8_0 = 0, kQ4_1 = 1 };

// Q8_0: fp16 scale d, then 32 int8 q;                  w[j] = d * q[j]
// Q4_1: fp16 scale d, fp16 min m, then 16 bytes whose low nibbles are q[0..15] and high nibbles
//       q[16..31] (0..15);                              w[j] = d * q[j] + m
// Dequantization is float32 arithmetic, a product and then a sum (never fused), as ggml and the
// gguf reader that Transformers loads GGUF files with compute it.
constexpr int64_t kQ8_0Bytes = 2 + 32;
constexpr int64_t kQ4_1Bytes = 2 + 2 + 16;

inline int64_t block_bytes(int format) { return format == kQ8_0 ? kQ8_0Bytes : kQ4_1Bytes; }

// The GEMV layout of a Q4_1 weight (decode's, qlinear_gemv_x16.h): the same blocks regrouped so
// that 16 output rows are read together. Output rows go in groups of kGemvGroupRows (out_features
// a multiple of it); group g holds, for each block b in order, kQ4_1GroupBlockBytes bytes:
//   the 16 rows' d (float16, row order), their 16 m, then 4 chunks c of 16 rows x 4 bytes, row i's
//   4 bytes being its GGML block's bytes 4c .. 4c+3 (q[4c .. 4c+3] low nibbles, q[16+4c ..] high).
// As a tensor it has the packed weight's shape (out_features, in_features / 32 * 20) and bytes,
// in that order: row-major blocks of group g are its rows 16g .. 16g+15.
constexpr int64_t kGemvGroupRows = 16;
constexpr int64_t kQ4_1GroupBlockBytes = kGemvGroupRows * kQ4_1Bytes;  // 320
// A Q8_0 weight's GEMV layout, likewise: per group and block kQ8_0GroupBlockBytes bytes, the 16
// rows' d (float16, row order), then 8 chunks c of 16 rows x 4 bytes, row i's 4 bytes being its
// q[4c .. 4c+3] (int8).
constexpr int64_t kQ8_0GroupBlockBytes = kGemvGroupRows * kQ8_0Bytes;  // 544
inline int64_t group_block_bytes(int format) { return format == kQ8_0 ? kQ8_0GroupBlockBytes : kQ4_1GroupBlockBytes; }

}  // namespace kx
