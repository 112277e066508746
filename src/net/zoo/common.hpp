// Building blocks shared by several zoo families: rectangular convolution specs and the
// convolution + batch norm + ReLU unit (torchvision's BasicConv2d) of Inception and ResNet.
#pragma once

#include <cstdint>
#include <string>

#include "net/graph_builder.hpp"

namespace cnnergy::zoo {

using Node = GraphBuilder::Node;

// Kernel kh x kw, padding (pad_h top and bottom, pad_w left and right), one stride for both axes.
ConvSpec conv_spec(std::int64_t out, std::int64_t kh, std::int64_t kw, std::int64_t stride, std::int64_t pad_h,
                   std::int64_t pad_w, bool bias);

// conv (no bias: the batch norm's shift replaces it) -> batch norm -> ReLU, named
// "<prefix>.conv", "<prefix>.bn", "<prefix>.relu" as torchvision's BasicConv2d.
Node conv_bn_relu(GraphBuilder& b, Node x, const std::string& prefix, const ConvSpec& spec, double bn_eps);

// Square-kernel shorthand of the above.
Node conv_bn_relu(GraphBuilder& b, Node x, const std::string& prefix, std::int64_t out, std::int64_t kernel,
                  std::int64_t stride, std::int64_t pad, double bn_eps);

}  // namespace cnnergy::zoo
