// LeNet-5 as Caffe's examples/mnist/lenet_train_test.prototxt: conv20 5x5, max pool 2/2, conv50 5x5,
// max pool 2/2, ip1 500, ReLU, ip2 (classes). No activation after the convolutions, as in Caffe.
// 1x28x28, 10 classes: 431,080 parameters.
#include "net/zoo/common.hpp"
#include "net/zoo/families.hpp"

namespace cnnergy::zoo {

GraphBuilder lenet5(const Shape& input, std::int64_t classes) {
  GraphBuilder b("lenet5", input, classes);
  // Caffe rounds pooled sizes up (ceil); identical to floor at 28x28, kept for other input sizes.
  const PoolSpec pool = PoolSpec::make(2, 2, 0, /*ceil_mode=*/true);
  Node x = b.conv(b.input(), "conv1", ConvSpec::make(20, 5));
  x = b.max_pool(x, "pool1", pool);
  x = b.conv(x, "conv2", ConvSpec::make(50, 5));
  x = b.max_pool(x, "pool2", pool);
  x = b.fc(x, "ip1", 500);
  x = b.relu(x, "relu1");
  x = b.fc(x, "ip2", classes);
  b.softmax_loss(x);
  return b;
}

}  // namespace cnnergy::zoo
