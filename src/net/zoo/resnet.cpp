// ResNet-34, -50 and -152 (He et al. 2016) exactly as torchvision: basic blocks for 34, bottleneck
// blocks with the stride on the 3x3 convolution ("v1.5") for 50 and 152, 1x1 projection + BN on the
// shortcut where the shape changes, convolutions without bias followed by batch norm (eps 1e-5).
// 3x224x224, 1000 classes: 21,797,672 / 25,557,032 / 60,192,808 parameters. `resnetim` is the
// ResNetIm of Castro et al. 2019 as their text and layer count describe it (below); `resnet34` is the
// network they cite for it, and the closer of the two to their Table 1 (docs/model-info.md).
#include <array>

#include "net/zoo/common.hpp"
#include "net/zoo/families.hpp"

namespace cnnergy::zoo {
namespace {

constexpr double kBnEps = 1e-5;

Node conv_bn(GraphBuilder& b, Node x, const std::string& conv_name, const std::string& bn_name, std::int64_t out,
             std::int64_t kernel, std::int64_t stride, std::int64_t pad) {
  BatchNormSpec bn;
  bn.eps = kBnEps;
  x = b.conv(x, conv_name, ConvSpec::make(out, kernel, stride, pad, 1, /*bias=*/false));
  return b.batch_norm(x, bn_name, bn);
}

// The shortcut: identity, or 1x1 convolution + BN when the block changes width or resolution.
Node shortcut(GraphBuilder& b, Node x, const std::string& n, std::int64_t in_channels, std::int64_t out_channels,
              std::int64_t stride) {
  if (stride == 1 && in_channels == out_channels) return x;
  return conv_bn(b, x, n + ".downsample.0", n + ".downsample.1", out_channels, 1, stride, 0);
}

Node basic_block(GraphBuilder& b, Node x, const std::string& n, std::int64_t in_channels, std::int64_t planes,
                 std::int64_t stride) {
  Node y = conv_bn(b, x, n + ".conv1", n + ".bn1", planes, 3, stride, 1);
  y = b.relu(y, n + ".relu1");
  y = conv_bn(b, y, n + ".conv2", n + ".bn2", planes, 3, 1, 1);
  y = b.add(y, shortcut(b, x, n, in_channels, planes, stride), n + ".add");
  return b.relu(y, n + ".relu");
}

Node bottleneck(GraphBuilder& b, Node x, const std::string& n, std::int64_t in_channels, std::int64_t planes,
                std::int64_t stride) {
  constexpr std::int64_t kExpansion = 4;
  Node y = conv_bn(b, x, n + ".conv1", n + ".bn1", planes, 1, 1, 0);
  y = b.relu(y, n + ".relu1");
  y = conv_bn(b, y, n + ".conv2", n + ".bn2", planes, 3, stride, 1);
  y = b.relu(y, n + ".relu2");
  y = conv_bn(b, y, n + ".conv3", n + ".bn3", planes * kExpansion, 1, 1, 0);
  y = b.add(y, shortcut(b, x, n, in_channels, planes * kExpansion, stride), n + ".add");
  return b.relu(y, n + ".relu");
}

GraphBuilder resnet(const std::string& name, const std::array<int, 4>& blocks, bool use_bottleneck,
                    const Shape& input, std::int64_t classes) {
  GraphBuilder b(name, input, classes);
  Node x = conv_bn(b, b.input(), "conv1", "bn1", 64, 7, 2, 3);
  x = b.relu(x, "relu");
  x = b.max_pool(x, "maxpool", PoolSpec::make(3, 2, 1));
  const std::int64_t expansion = use_bottleneck ? 4 : 1;
  std::int64_t channels = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const std::int64_t planes = std::int64_t{64} << stage;
    for (int i = 0; i < blocks[static_cast<std::size_t>(stage)]; ++i) {
      const std::int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      const std::string n = "layer" + std::to_string(stage + 1) + "." + std::to_string(i);
      x = use_bottleneck ? bottleneck(b, x, n, channels, planes, stride) : basic_block(b, x, n, channels, planes, stride);
      channels = planes * expansion;
    }
  }
  x = b.global_avg_pool(x, "avgpool");
  x = b.fc(x, "fc", classes);
  b.softmax_loss(x);
  return b;
}

}  // namespace

// ResNetIm as Castro et al. 2019 (Sec. 4.1, Fig. 1d) describe it: conv1 64 7x7 + ReLU, max pool 3x3
// stride 2, then before each of the four stages an adapter convolution "to resize the input image to
// that of the next block" (3x3 + ReLU; stride 1 before ResB1, 2 before the others) and 3/4/6/3 residual
// blocks of two 3x3 convolutions plus a sum (conv, ReLU, conv, sum, ReLU), global average pooling,
// a fully connected classifier and softmax. Their "94 layers" are exactly these layers without batch
// normalisation (3 + 4 x 2 + 16 x 5 + 3), so there is none, and the convolutions carry biases as
// Caffe's do. conv1 has stride 2 as in He et al. 2016 (ref. [47]), not the text's 1, which would
// quadruple every later map (16.5 G operations at 224x224, 7.9x the paper's Table 1).
GraphBuilder resnetim(const Shape& input, std::int64_t classes) {
  GraphBuilder b("resnetim", input, classes);
  Node x = b.conv(b.input(), "conv1", ConvSpec::make(64, 7, 2, 3));
  x = b.relu(x, "relu1");
  x = b.max_pool(x, "pool1", PoolSpec::make(3, 2, 1));
  constexpr std::array<int, 4> kBlocks = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    const std::int64_t width = std::int64_t{64} << stage;
    const std::string s = "resb" + std::to_string(stage + 1);
    x = b.conv(x, s + ".adapter", ConvSpec::make(width, 3, stage == 0 ? 1 : 2, 1));
    x = b.relu(x, s + ".adapter_relu");
    for (int i = 0; i < kBlocks[static_cast<std::size_t>(stage)]; ++i) {
      const std::string n = s + "." + std::to_string(i);
      Node y = b.conv(x, n + ".conv1", ConvSpec::make(width, 3, 1, 1));
      y = b.relu(y, n + ".relu1");
      y = b.conv(y, n + ".conv2", ConvSpec::make(width, 3, 1, 1));
      y = b.add(y, x, n + ".sum");
      x = b.relu(y, n + ".relu");
    }
  }
  x = b.global_avg_pool(x, "pool");
  x = b.fc(x, "fc", classes);
  b.softmax_loss(x);
  return b;
}

GraphBuilder resnet34(const Shape& input, std::int64_t classes) {
  return resnet("resnet34", {3, 4, 6, 3}, false, input, classes);
}
GraphBuilder resnet50(const Shape& input, std::int64_t classes) {
  return resnet("resnet50", {3, 4, 6, 3}, true, input, classes);
}
GraphBuilder resnet152(const Shape& input, std::int64_t classes) {
  return resnet("resnet152", {3, 8, 36, 3}, true, input, classes);
}

}  // namespace cnnergy::zoo
