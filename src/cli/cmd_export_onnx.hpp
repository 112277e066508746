// `cnnergy export-onnx MODEL OUT.onnx`: a zoo model or an imported one, with its weights (seeded,
// the file's, or a checkpoint from train --save), as an ONNX file other runtimes run.
#pragma once

#include <string>
#include <vector>

namespace cnnergy::cli {

int run_export_onnx(const std::vector<std::string>& args);

}  // namespace cnnergy::cli
