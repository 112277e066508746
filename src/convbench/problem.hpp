// The convolution problems a study runs: parsed from `--problem n=..,c=..,...` text, taken from a
// preset of Li et al. 2016's configurations, or collected from a model (every distinct convolution,
// with the layers that share it). Also the counts every cell derives from a problem (FLOPs, bytes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/ops.hpp"

namespace cnnergy::convbench {

struct ConvProblem {
  std::string id;                   // canonical text: "n=128,c=64,h=56,w=56,k=64,r=3,s=3,stride=1,pad=1"
  std::string source;               // "command line", "li2016 Table I Conv1", "resnet50", ...
  Conv2dDesc desc;                  // bias off: the study times the convolution alone
  std::vector<std::string> layers;  // the model's layers that run this problem (model source only)
  bool backward_data_used = true;   // false when no layer sharing it needs a data gradient (first conv)
};

// Parses "n=128,c=64,h=56,w=56,k=64,r=3,s=3,stride=1,pad=1[,groups=G,dilation=D]": n, c, h, w, k, r, s
// are required; stride and dilation default to 1, pad to 0, groups to 1. Every value is a decimal
// integer (>= 1; pad >= 0). InvalidArgument naming the key for an unknown, repeated, missing or bad
// key. A problem whose kernel does not fit the padded input, or whose groups do not divide the
// channels, parses: its cells get the status "unsupported" with the rule (problem_rule).
ConvProblem parse_problem(std::string_view text);

// The canonical id of a descriptor (pad printed once when symmetric, else pad_top/.. each).
std::string problem_id(const Conv2dDesc& d);

// Why no implementation can run the problem (empty output, kernel larger than the padded input,
// groups that do not divide the channels); empty when the geometry is valid.
std::optional<std::string> problem_rule(const Conv2dDesc& d);

// Names of the presets (`--preset`), and their problems. `memory_scale` multiplies the paper's batch
// sizes (today's GPU memory over the 12 GB of Li et al. 2016's K40c, rounded down to a power of two;
// 1 keeps the paper's batches).
const std::vector<std::string>& preset_names();
std::vector<ConvProblem> preset_problems(std::string_view name, std::int64_t memory_scale);
// The scale for `total_bytes` of device memory (0 or unknown: 1).
std::int64_t li2016_memory_scale(std::size_t total_bytes);

// Every distinct convolution of a zoo model at `batch`, in the order of first use, naming the layers
// that share each. InvalidArgument for an unknown model (listing the zoo).
std::vector<ConvProblem> model_problems(std::string_view model, std::int64_t batch);

// Counts of one problem. FLOPs = 2 N K (C/groups) R S P Q for each direction (bias excluded);
// bytes = the three tensors each direction touches once (x, w, y), at `dtype_bytes` each element.
double problem_flops(const Conv2dDesc& d);
std::size_t problem_tensor_bytes(const Conv2dDesc& d, std::size_t dtype_bytes);
std::size_t weight_bytes(const Conv2dDesc& d, std::size_t dtype_bytes);

}  // namespace cnnergy::convbench
