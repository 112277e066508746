// Checkpoints: every parameter (fp32 master), batch-norm running statistics, momentum and the
// solver state in one binary file with a magic, a version, the model name, per-tensor names and
// shapes, and a checksum. Tensors are stored fp32 in logical NCHW order whatever the backend's
// layout/dtype, so a checkpoint moves between backends. Wrong model, truncated or corrupt file:
// DataError saying which.
//
// Format (little-endian): "CNNRGCKP" | u32 version | string model | i64 iteration | f64 lr |
// f32 loss_scale | i64 good_steps | i64 skipped_steps | u32 n | n x (string name | u32 rank |
// rank x i64 dims | u64 count | count x f32) | u64 FNV-1a 64 of all preceding bytes.
// string = u32 length + bytes.
#pragma once

#include <string>

namespace cnnergy {

class Executor;
class SgdSolver;

// Writes atomically (temporary file then rename). Waits for the device (downloads).
void save_checkpoint(const std::string& path, Executor& executor, SgdSolver& solver);
// Restores parameters (and working copies), buffers, momentum and solver state.
void load_checkpoint(const std::string& path, Executor& executor, SgdSolver& solver);
// Parameters and buffers only (inference from a training checkpoint); momentum/state ignored.
void load_parameters(const std::string& path, Executor& executor);

}  // namespace cnnergy
