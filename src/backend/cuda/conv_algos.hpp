// cuDNN's convolution algorithms by direction, with the names flags, reports and the results store
// use ("implicit_precomp_gemm", "winograd_nonfused", "algo_3", ...), and the check of a run-wide
// algorithm policy.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace cnnergy::cuda {

enum class ConvDirection { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

struct NamedConvAlgo {
  int value;  // the cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t value
  const char* name;
};

std::span<const NamedConvAlgo> conv_algos(ConvDirection d);
const char* direction_name(ConvDirection d);  // "forward", "backward_data", "backward_filter"
const NamedConvAlgo* find_conv_algo(ConvDirection d, const std::string& name);  // null if unknown
std::string conv_algo_name(ConvDirection d, int value);
std::string valid_conv_algo_names(ConvDirection d);  // "find, heuristic, ..., implicit_gemm, ..."

// The policies that choose for themselves: "find" and "heuristic" (the legacy API's
// cudnnFind*AlgorithmEx and cudnnGet*Algorithm_v7), "graph_find" and "graph_heuristic" (the graph
// API's engines: conv_graph_plan.hpp), and "auto" (find's algorithm or graph_find's plan,
// whichever costs less device plus host time per call).
bool is_search_policy(const std::string& policy);
bool is_graph_policy(const std::string& policy);  // graph_find | graph_heuristic
// One graph-API engine configuration named in a direction's field: "graph:" and the engine tag as
// GraphConvPlan::engine() writes it ("graph:eng28_k2=3_k3=0"), which is also what ConvAlgoInfo
// reports for a direction a graph plan runs. Per problem: graph_conv_engine_tags lists them.
inline constexpr const char* kGraphEnginePrefix = "graph:";
bool is_graph_engine_policy(const std::string& policy);

// A search policy, an algorithm name of any direction or "own:NAME" (own_conv.hpp);
// InvalidArgument listing every valid name otherwise.
void validate_conv_algo_policy(const std::string& policy);

}  // namespace cnnergy::cuda
