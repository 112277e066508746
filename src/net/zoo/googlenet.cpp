// GoogLeNet (Inception v1) exactly as torchvision's models.googlenet(aux_logits=False): every
// convolution is conv (no bias) + batch norm (eps 1e-3) + ReLU, no LRN, and, as torchvision, the
// "5x5" branch uses a 3x3 kernel (a quirk torchvision keeps for its pretrained weights; see
// docs/model-info.md). 3x224x224, 1000 classes: 6,624,904 parameters.
#include "net/zoo/common.hpp"
#include "net/zoo/families.hpp"

namespace cnnergy::zoo {
namespace {

constexpr double kBnEps = 1e-3;

struct InceptionWidths {
  std::int64_t ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj;
};

Node inception(GraphBuilder& b, Node x, const std::string& name, const InceptionWidths& w) {
  const Node b1 = conv_bn_relu(b, x, name + ".branch1", w.ch1x1, 1, 1, 0, kBnEps);
  Node b2 = conv_bn_relu(b, x, name + ".branch2.0", w.ch3x3red, 1, 1, 0, kBnEps);
  b2 = conv_bn_relu(b, b2, name + ".branch2.1", w.ch3x3, 3, 1, 1, kBnEps);
  Node b3 = conv_bn_relu(b, x, name + ".branch3.0", w.ch5x5red, 1, 1, 0, kBnEps);
  b3 = conv_bn_relu(b, b3, name + ".branch3.1", w.ch5x5, 3, 1, 1, kBnEps);  // 3x3, as torchvision
  Node b4 = b.max_pool(x, name + ".branch4.0", PoolSpec::make(3, 1, 1, /*ceil_mode=*/true));
  b4 = conv_bn_relu(b, b4, name + ".branch4.1", w.pool_proj, 1, 1, 0, kBnEps);
  return b.concat({b1, b2, b3, b4}, name + ".concat");
}

}  // namespace

GraphBuilder googlenet(const Shape& input, std::int64_t classes) {
  GraphBuilder b("googlenet", input, classes);
  const PoolSpec pool3 = PoolSpec::make(3, 2, 0, /*ceil_mode=*/true);
  Node x = conv_bn_relu(b, b.input(), "conv1", 64, 7, 2, 3, kBnEps);
  x = b.max_pool(x, "maxpool1", pool3);
  x = conv_bn_relu(b, x, "conv2", 64, 1, 1, 0, kBnEps);
  x = conv_bn_relu(b, x, "conv3", 192, 3, 1, 1, kBnEps);
  x = b.max_pool(x, "maxpool2", pool3);
  x = inception(b, x, "inception3a", {64, 96, 128, 16, 32, 32});
  x = inception(b, x, "inception3b", {128, 128, 192, 32, 96, 64});
  x = b.max_pool(x, "maxpool3", pool3);
  x = inception(b, x, "inception4a", {192, 96, 208, 16, 48, 64});
  x = inception(b, x, "inception4b", {160, 112, 224, 24, 64, 64});
  x = inception(b, x, "inception4c", {128, 128, 256, 24, 64, 64});
  x = inception(b, x, "inception4d", {112, 144, 288, 32, 64, 64});
  x = inception(b, x, "inception4e", {256, 160, 320, 32, 128, 128});
  x = b.max_pool(x, "maxpool4", PoolSpec::make(2, 2, 0, /*ceil_mode=*/true));
  x = inception(b, x, "inception5a", {256, 160, 320, 32, 128, 128});
  x = inception(b, x, "inception5b", {384, 192, 384, 48, 128, 128});
  x = b.global_avg_pool(x, "avgpool");
  x = b.dropout(x, "dropout", 0.2f);
  x = b.fc(x, "fc", classes);
  b.softmax_loss(x);
  return b;
}

}  // namespace cnnergy::zoo
