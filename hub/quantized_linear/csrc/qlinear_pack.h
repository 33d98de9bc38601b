// Packing float weights into Q8_0 / Q4_1 blocks (qlinear_format.h). Runs once per weight, so it
// is plain C++ compiled once, not per instruction set.
#pragma once
#include <ATen/ATen.h>

namespace kx {

// weight (out, in), float32 / bfloat16 / float16, in % 32 == 0 -> uint8 (out, in / 32 * block bytes).
at::Tensor quantize_weight(const at::Tensor& weight, int format, const char* op);

// A packed weight (N, K / 32 * block bytes), N a multiple of kGemvGroupRows -> the same blocks in
// the GEMV layout (qlinear_format.h), a tensor of the same shape (from 2 MiB up on transparent huge
// pages where Linux offers them: decode streams it whole on every token).
at::Tensor gemv_layout(const at::Tensor& packed, int format, const char* op);

}  // namespace kx
