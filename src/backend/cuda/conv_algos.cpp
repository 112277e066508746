// cuDNN's convolution algorithm names per direction and the run-wide policy check.
#include "backend/cuda/conv_algos.hpp"

#include <cudnn.h>

#include "backend/cuda/own_conv.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

namespace {

constexpr NamedConvAlgo kForwardAlgos[] = {
    {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, "implicit_gemm"},
    {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, "implicit_precomp_gemm"},
    {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, "gemm"},
    {CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, "direct"},
    {CUDNN_CONVOLUTION_FWD_ALGO_FFT, "fft"},
    {CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING, "fft_tiling"},
    {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, "winograd"},
    {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, "winograd_nonfused"},
};
constexpr NamedConvAlgo kBackwardDataAlgos[] = {
    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, "algo_0"},
    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, "algo_1"},
    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, "fft"},
    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING, "fft_tiling"},
    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD, "winograd"},
    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED, "winograd_nonfused"},
};
constexpr NamedConvAlgo kBackwardFilterAlgos[] = {
    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, "algo_0"},
    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, "algo_1"},
    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, "fft"},
    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, "algo_3"},
    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED, "winograd_nonfused"},
    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING, "fft_tiling"},
};

constexpr ConvDirection kDirections[] = {ConvDirection::kForward, ConvDirection::kBackwardData,
                                         ConvDirection::kBackwardFilter};

}  // namespace

std::span<const NamedConvAlgo> conv_algos(ConvDirection d) {
  switch (d) {
    case ConvDirection::kForward:
      return kForwardAlgos;
    case ConvDirection::kBackwardData:
      return kBackwardDataAlgos;
    case ConvDirection::kBackwardFilter:
      break;
  }
  return kBackwardFilterAlgos;
}

const char* direction_name(ConvDirection d) {
  switch (d) {
    case ConvDirection::kForward:
      return "forward";
    case ConvDirection::kBackwardData:
      return "backward_data";
    case ConvDirection::kBackwardFilter:
      break;
  }
  return "backward_filter";
}

const NamedConvAlgo* find_conv_algo(ConvDirection d, const std::string& name) {
  for (const NamedConvAlgo& a : conv_algos(d))
    if (name == a.name) return &a;
  return nullptr;
}

std::string conv_algo_name(ConvDirection d, int value) {
  for (const NamedConvAlgo& a : conv_algos(d))
    if (a.value == value) return a.name;
  return "algo#" + std::to_string(value);
}

bool is_search_policy(const std::string& policy) {
  return policy == "auto" || policy == "find" || policy == "heuristic" || is_graph_policy(policy);
}

bool is_graph_policy(const std::string& policy) {
  return policy == "graph_find" || policy == "graph_heuristic";
}

bool is_graph_engine_policy(const std::string& policy) {
  return policy.rfind(std::string(kGraphEnginePrefix) + "eng", 0) == 0;
}

std::string valid_conv_algo_names(ConvDirection d) {
  std::string s = "auto, find, heuristic, graph_find, graph_heuristic";
  for (const NamedConvAlgo& a : conv_algos(d)) s += std::string(", ") + a.name;
  return s;
}

void validate_conv_algo_policy(const std::string& policy) {
  if (is_search_policy(policy)) return;
  if (has_own_prefix(policy)) {
    own_conv_implementation(policy);  // InvalidArgument listing the own names when unknown
    return;
  }
  for (ConvDirection d : kDirections)
    if (find_conv_algo(d, policy)) return;
  std::string all;
  for (ConvDirection d : kDirections)
    all += "; " + std::string(direction_name(d)) + ": " + valid_conv_algo_names(d);
  std::string own;
  for (const char* n : own_conv_implementations()) own += std::string(own.empty() ? "" : ", ") + kOwnConvPrefix + n;
  throw InvalidArgument("unknown convolution algorithm policy '" + policy + "'" + all +
                        "; own implementations (per layer, cuDNN auto where one cannot run): " + own);
}

}  // namespace cnnergy::cuda
