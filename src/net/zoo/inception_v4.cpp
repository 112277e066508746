// Inception v4 (Szegedy et al. 2017) as Cadene's pretrainedmodels / timm `inception_v4`: conv (no
// bias) + batch norm (eps 1e-3) + ReLU units, average pools that do not count the padding.
// 3x299x299, 1000 classes: 42,679,816 parameters.
#include "net/zoo/common.hpp"
#include "net/zoo/families.hpp"

namespace cnnergy::zoo {
namespace {

constexpr double kBnEps = 1e-3;

Node unit(GraphBuilder& b, Node x, const std::string& name, std::int64_t out, std::int64_t kh, std::int64_t kw,
          std::int64_t stride = 1, std::int64_t pad_h = 0, std::int64_t pad_w = 0) {
  return conv_bn_relu(b, x, name, conv_spec(out, kh, kw, stride, pad_h, pad_w, false), kBnEps);
}

Node avg_pool_3x3(GraphBuilder& b, Node x, const std::string& name) {
  return b.avg_pool(x, name, PoolSpec::make(3, 1, 1, false, PoolMode::kAvgExcludePad));
}

Node max_pool_3x3_s2(GraphBuilder& b, Node x, const std::string& name) {
  return b.max_pool(x, name, PoolSpec::make(3, 2));
}

Node inception_a(GraphBuilder& b, Node x, const std::string& n) {
  const Node b0 = unit(b, x, n + ".branch0", 96, 1, 1);
  Node b1 = unit(b, x, n + ".branch1.0", 64, 1, 1);
  b1 = unit(b, b1, n + ".branch1.1", 96, 3, 3, 1, 1, 1);
  Node b2 = unit(b, x, n + ".branch2.0", 64, 1, 1);
  b2 = unit(b, b2, n + ".branch2.1", 96, 3, 3, 1, 1, 1);
  b2 = unit(b, b2, n + ".branch2.2", 96, 3, 3, 1, 1, 1);
  Node b3 = avg_pool_3x3(b, x, n + ".branch3.0");
  b3 = unit(b, b3, n + ".branch3.1", 96, 1, 1);
  return b.concat({b0, b1, b2, b3}, n + ".concat");
}

Node reduction_a(GraphBuilder& b, Node x, const std::string& n) {
  const Node b0 = unit(b, x, n + ".branch0", 384, 3, 3, 2);
  Node b1 = unit(b, x, n + ".branch1.0", 192, 1, 1);
  b1 = unit(b, b1, n + ".branch1.1", 224, 3, 3, 1, 1, 1);
  b1 = unit(b, b1, n + ".branch1.2", 256, 3, 3, 2);
  const Node b2 = max_pool_3x3_s2(b, x, n + ".branch2");
  return b.concat({b0, b1, b2}, n + ".concat");
}

Node inception_b(GraphBuilder& b, Node x, const std::string& n) {
  const Node b0 = unit(b, x, n + ".branch0", 384, 1, 1);
  Node b1 = unit(b, x, n + ".branch1.0", 192, 1, 1);
  b1 = unit(b, b1, n + ".branch1.1", 224, 1, 7, 1, 0, 3);
  b1 = unit(b, b1, n + ".branch1.2", 256, 7, 1, 1, 3, 0);
  Node b2 = unit(b, x, n + ".branch2.0", 192, 1, 1);
  b2 = unit(b, b2, n + ".branch2.1", 192, 7, 1, 1, 3, 0);
  b2 = unit(b, b2, n + ".branch2.2", 224, 1, 7, 1, 0, 3);
  b2 = unit(b, b2, n + ".branch2.3", 224, 7, 1, 1, 3, 0);
  b2 = unit(b, b2, n + ".branch2.4", 256, 1, 7, 1, 0, 3);
  Node b3 = avg_pool_3x3(b, x, n + ".branch3.0");
  b3 = unit(b, b3, n + ".branch3.1", 128, 1, 1);
  return b.concat({b0, b1, b2, b3}, n + ".concat");
}

Node reduction_b(GraphBuilder& b, Node x, const std::string& n) {
  Node b0 = unit(b, x, n + ".branch0.0", 192, 1, 1);
  b0 = unit(b, b0, n + ".branch0.1", 192, 3, 3, 2);
  Node b1 = unit(b, x, n + ".branch1.0", 256, 1, 1);
  b1 = unit(b, b1, n + ".branch1.1", 256, 1, 7, 1, 0, 3);
  b1 = unit(b, b1, n + ".branch1.2", 320, 7, 1, 1, 3, 0);
  b1 = unit(b, b1, n + ".branch1.3", 320, 3, 3, 2);
  const Node b2 = max_pool_3x3_s2(b, x, n + ".branch2");
  return b.concat({b0, b1, b2}, n + ".concat");
}

Node inception_c(GraphBuilder& b, Node x, const std::string& n) {
  const Node b0 = unit(b, x, n + ".branch0", 256, 1, 1);
  const Node b1 = unit(b, x, n + ".branch1_0", 384, 1, 1);
  const Node b1a = unit(b, b1, n + ".branch1_1a", 256, 1, 3, 1, 0, 1);
  const Node b1b = unit(b, b1, n + ".branch1_1b", 256, 3, 1, 1, 1, 0);
  Node b2 = unit(b, x, n + ".branch2_0", 384, 1, 1);
  b2 = unit(b, b2, n + ".branch2_1", 448, 3, 1, 1, 1, 0);
  b2 = unit(b, b2, n + ".branch2_2", 512, 1, 3, 1, 0, 1);
  const Node b2a = unit(b, b2, n + ".branch2_3a", 256, 1, 3, 1, 0, 1);
  const Node b2b = unit(b, b2, n + ".branch2_3b", 256, 3, 1, 1, 1, 0);
  Node b3 = avg_pool_3x3(b, x, n + ".branch3.0");
  b3 = unit(b, b3, n + ".branch3.1", 256, 1, 1);
  return b.concat({b0, b1a, b1b, b2a, b2b, b3}, n + ".concat");
}

}  // namespace

GraphBuilder inception_v4(const Shape& input, std::int64_t classes) {
  GraphBuilder b("inception_v4", input, classes);
  int index = 0;  // timm's `features` index of each stage
  auto next = [&index]() { return "features." + std::to_string(index++); };
  Node x = unit(b, b.input(), next(), 32, 3, 3, 2);
  x = unit(b, x, next(), 32, 3, 3);
  x = unit(b, x, next(), 64, 3, 3, 1, 1, 1);
  {  // Mixed_3a: max pool and a strided convolution side by side
    const std::string n = next();
    const Node pool = max_pool_3x3_s2(b, x, n + ".maxpool");
    const Node conv = unit(b, x, n + ".conv", 96, 3, 3, 2);
    x = b.concat({pool, conv}, n + ".concat");
  }
  {  // Mixed_4a
    const std::string n = next();
    Node b0 = unit(b, x, n + ".branch0.0", 64, 1, 1);
    b0 = unit(b, b0, n + ".branch0.1", 96, 3, 3);
    Node b1 = unit(b, x, n + ".branch1.0", 64, 1, 1);
    b1 = unit(b, b1, n + ".branch1.1", 64, 1, 7, 1, 0, 3);
    b1 = unit(b, b1, n + ".branch1.2", 64, 7, 1, 1, 3, 0);
    b1 = unit(b, b1, n + ".branch1.3", 96, 3, 3);
    x = b.concat({b0, b1}, n + ".concat");
  }
  {  // Mixed_5a
    const std::string n = next();
    const Node conv = unit(b, x, n + ".conv", 192, 3, 3, 2);
    const Node pool = max_pool_3x3_s2(b, x, n + ".maxpool");
    x = b.concat({conv, pool}, n + ".concat");
  }
  for (int i = 0; i < 4; ++i) x = inception_a(b, x, next());
  x = reduction_a(b, x, next());
  for (int i = 0; i < 7; ++i) x = inception_b(b, x, next());
  x = reduction_b(b, x, next());
  for (int i = 0; i < 3; ++i) x = inception_c(b, x, next());
  x = b.global_avg_pool(x, "global_pool");
  x = b.fc(x, "last_linear", classes);
  b.softmax_loss(x);
  return b;
}

}  // namespace cnnergy::zoo
