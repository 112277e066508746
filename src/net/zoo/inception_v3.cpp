// Inception v3 (Szegedy et al. 2016) exactly as torchvision's models.inception_v3 WITHOUT the
// auxiliary classifier (aux_logits=False): conv (no bias) + batch norm (eps 1e-3) + ReLU units,
// average pools counting the padding (PyTorch's default). 3x299x299, 1000 classes: 23,834,568
// parameters (27,161,264 with the auxiliary head, which is not built).
#include "net/zoo/common.hpp"
#include "net/zoo/families.hpp"

namespace cnnergy::zoo {
namespace {

constexpr double kBnEps = 1e-3;

Node unit(GraphBuilder& b, Node x, const std::string& name, std::int64_t out, std::int64_t kh, std::int64_t kw,
          std::int64_t stride, std::int64_t pad_h, std::int64_t pad_w) {
  return conv_bn_relu(b, x, name, conv_spec(out, kh, kw, stride, pad_h, pad_w, false), kBnEps);
}

Node avg_pool_3x3(GraphBuilder& b, Node x, const std::string& name) {
  return b.avg_pool(x, name, PoolSpec::make(3, 1, 1, false, PoolMode::kAvgIncludePad));
}

Node inception_a(GraphBuilder& b, Node x, const std::string& n, std::int64_t pool_features) {
  const Node b1 = unit(b, x, n + ".branch1x1", 64, 1, 1, 1, 0, 0);
  Node b5 = unit(b, x, n + ".branch5x5_1", 48, 1, 1, 1, 0, 0);
  b5 = unit(b, b5, n + ".branch5x5_2", 64, 5, 5, 1, 2, 2);
  Node b3 = unit(b, x, n + ".branch3x3dbl_1", 64, 1, 1, 1, 0, 0);
  b3 = unit(b, b3, n + ".branch3x3dbl_2", 96, 3, 3, 1, 1, 1);
  b3 = unit(b, b3, n + ".branch3x3dbl_3", 96, 3, 3, 1, 1, 1);
  Node bp = avg_pool_3x3(b, x, n + ".branch_pool.avg");
  bp = unit(b, bp, n + ".branch_pool", pool_features, 1, 1, 1, 0, 0);
  return b.concat({b1, b5, b3, bp}, n + ".concat");
}

Node inception_b(GraphBuilder& b, Node x, const std::string& n) {
  const Node b3 = unit(b, x, n + ".branch3x3", 384, 3, 3, 2, 0, 0);
  Node bd = unit(b, x, n + ".branch3x3dbl_1", 64, 1, 1, 1, 0, 0);
  bd = unit(b, bd, n + ".branch3x3dbl_2", 96, 3, 3, 1, 1, 1);
  bd = unit(b, bd, n + ".branch3x3dbl_3", 96, 3, 3, 2, 0, 0);
  const Node bp = b.max_pool(x, n + ".branch_pool", PoolSpec::make(3, 2));
  return b.concat({b3, bd, bp}, n + ".concat");
}

Node inception_c(GraphBuilder& b, Node x, const std::string& n, std::int64_t c7) {
  const Node b1 = unit(b, x, n + ".branch1x1", 192, 1, 1, 1, 0, 0);
  Node b7 = unit(b, x, n + ".branch7x7_1", c7, 1, 1, 1, 0, 0);
  b7 = unit(b, b7, n + ".branch7x7_2", c7, 1, 7, 1, 0, 3);
  b7 = unit(b, b7, n + ".branch7x7_3", 192, 7, 1, 1, 3, 0);
  Node bd = unit(b, x, n + ".branch7x7dbl_1", c7, 1, 1, 1, 0, 0);
  bd = unit(b, bd, n + ".branch7x7dbl_2", c7, 7, 1, 1, 3, 0);
  bd = unit(b, bd, n + ".branch7x7dbl_3", c7, 1, 7, 1, 0, 3);
  bd = unit(b, bd, n + ".branch7x7dbl_4", c7, 7, 1, 1, 3, 0);
  bd = unit(b, bd, n + ".branch7x7dbl_5", 192, 1, 7, 1, 0, 3);
  Node bp = avg_pool_3x3(b, x, n + ".branch_pool.avg");
  bp = unit(b, bp, n + ".branch_pool", 192, 1, 1, 1, 0, 0);
  return b.concat({b1, b7, bd, bp}, n + ".concat");
}

Node inception_d(GraphBuilder& b, Node x, const std::string& n) {
  Node b3 = unit(b, x, n + ".branch3x3_1", 192, 1, 1, 1, 0, 0);
  b3 = unit(b, b3, n + ".branch3x3_2", 320, 3, 3, 2, 0, 0);
  Node b7 = unit(b, x, n + ".branch7x7x3_1", 192, 1, 1, 1, 0, 0);
  b7 = unit(b, b7, n + ".branch7x7x3_2", 192, 1, 7, 1, 0, 3);
  b7 = unit(b, b7, n + ".branch7x7x3_3", 192, 7, 1, 1, 3, 0);
  b7 = unit(b, b7, n + ".branch7x7x3_4", 192, 3, 3, 2, 0, 0);
  const Node bp = b.max_pool(x, n + ".branch_pool", PoolSpec::make(3, 2));
  return b.concat({b3, b7, bp}, n + ".concat");
}

Node inception_e(GraphBuilder& b, Node x, const std::string& n) {
  const Node b1 = unit(b, x, n + ".branch1x1", 320, 1, 1, 1, 0, 0);
  const Node b3 = unit(b, x, n + ".branch3x3_1", 384, 1, 1, 1, 0, 0);
  const Node b3a = unit(b, b3, n + ".branch3x3_2a", 384, 1, 3, 1, 0, 1);
  const Node b3b = unit(b, b3, n + ".branch3x3_2b", 384, 3, 1, 1, 1, 0);
  Node bd = unit(b, x, n + ".branch3x3dbl_1", 448, 1, 1, 1, 0, 0);
  bd = unit(b, bd, n + ".branch3x3dbl_2", 384, 3, 3, 1, 1, 1);
  const Node bda = unit(b, bd, n + ".branch3x3dbl_3a", 384, 1, 3, 1, 0, 1);
  const Node bdb = unit(b, bd, n + ".branch3x3dbl_3b", 384, 3, 1, 1, 1, 0);
  Node bp = avg_pool_3x3(b, x, n + ".branch_pool.avg");
  bp = unit(b, bp, n + ".branch_pool", 192, 1, 1, 1, 0, 0);
  // torchvision concatenates [1x1, (3a, 3b), (dbl 3a, dbl 3b), pool]: one flat concat, same order.
  return b.concat({b1, b3a, b3b, bda, bdb, bp}, n + ".concat");
}

}  // namespace

GraphBuilder inception_v3(const Shape& input, std::int64_t classes) {
  GraphBuilder b("inception_v3", input, classes);
  Node x = unit(b, b.input(), "Conv2d_1a_3x3", 32, 3, 3, 2, 0, 0);
  x = unit(b, x, "Conv2d_2a_3x3", 32, 3, 3, 1, 0, 0);
  x = unit(b, x, "Conv2d_2b_3x3", 64, 3, 3, 1, 1, 1);
  x = b.max_pool(x, "maxpool1", PoolSpec::make(3, 2));
  x = unit(b, x, "Conv2d_3b_1x1", 80, 1, 1, 1, 0, 0);
  x = unit(b, x, "Conv2d_4a_3x3", 192, 3, 3, 1, 0, 0);
  x = b.max_pool(x, "maxpool2", PoolSpec::make(3, 2));
  x = inception_a(b, x, "Mixed_5b", 32);
  x = inception_a(b, x, "Mixed_5c", 64);
  x = inception_a(b, x, "Mixed_5d", 64);
  x = inception_b(b, x, "Mixed_6a");
  x = inception_c(b, x, "Mixed_6b", 128);
  x = inception_c(b, x, "Mixed_6c", 160);
  x = inception_c(b, x, "Mixed_6d", 160);
  x = inception_c(b, x, "Mixed_6e", 192);
  x = inception_d(b, x, "Mixed_7a");
  x = inception_e(b, x, "Mixed_7b");
  x = inception_e(b, x, "Mixed_7c");
  x = b.global_avg_pool(x, "avgpool");
  x = b.dropout(x, "dropout", 0.5f);
  x = b.fc(x, "fc", classes);
  b.softmax_loss(x);
  return b;
}

}  // namespace cnnergy::zoo
