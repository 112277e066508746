// OverFeat "fast" model (Sermanet et al. 2014, ICLR, Table 1): 3x231x231, no LRN, non-overlapping
// 2x2 max pooling, conv 96-256-512-1024-1024, fc 3072-4096-classes, dropout 0.5 on fc6 and fc7.
// 1000 classes: 145,920,872 parameters (the paper rounds to 145 M).
#include "net/zoo/common.hpp"
#include "net/zoo/families.hpp"

namespace cnnergy::zoo {

GraphBuilder overfeat(const Shape& input, std::int64_t classes) {
  GraphBuilder b("overfeat", input, classes);
  const PoolSpec pool = PoolSpec::make(2, 2);
  Node x = b.conv(b.input(), "conv1", ConvSpec::make(96, 11, 4));
  x = b.relu(x, "relu1");
  x = b.max_pool(x, "pool1", pool);
  x = b.conv(x, "conv2", ConvSpec::make(256, 5, 1));
  x = b.relu(x, "relu2");
  x = b.max_pool(x, "pool2", pool);
  x = b.conv(x, "conv3", ConvSpec::make(512, 3, 1, 1));
  x = b.relu(x, "relu3");
  x = b.conv(x, "conv4", ConvSpec::make(1024, 3, 1, 1));
  x = b.relu(x, "relu4");
  x = b.conv(x, "conv5", ConvSpec::make(1024, 3, 1, 1));
  x = b.relu(x, "relu5");
  x = b.max_pool(x, "pool5", pool);
  x = b.fc(x, "fc6", 3072);
  x = b.relu(x, "relu6");
  x = b.dropout(x, "drop6", 0.5f);
  x = b.fc(x, "fc7", 4096);
  x = b.relu(x, "relu7");
  x = b.dropout(x, "drop7", 0.5f);
  x = b.fc(x, "fc8", classes);
  b.softmax_loss(x);
  return b;
}

}  // namespace cnnergy::zoo
