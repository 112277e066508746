// AlexNet as torchvision's models.alexnet: the single-tower "one weird trick" variant (Krizhevsky
// 2014, arXiv:1404.5997) with 64-192-384-256-256 filters and no LRN. 3x224x224, 1000 classes:
// 61,100,840 parameters.
#include "net/zoo/common.hpp"
#include "net/zoo/families.hpp"

namespace cnnergy::zoo {

GraphBuilder alexnet(const Shape& input, std::int64_t classes) {
  GraphBuilder b("alexnet", input, classes);
  const PoolSpec pool = PoolSpec::make(3, 2);
  Node x = b.conv(b.input(), "features.0", ConvSpec::make(64, 11, 4, 2));
  x = b.relu(x, "features.1");
  x = b.max_pool(x, "features.2", pool);
  x = b.conv(x, "features.3", ConvSpec::make(192, 5, 1, 2));
  x = b.relu(x, "features.4");
  x = b.max_pool(x, "features.5", pool);
  x = b.conv(x, "features.6", ConvSpec::make(384, 3, 1, 1));
  x = b.relu(x, "features.7");
  x = b.conv(x, "features.8", ConvSpec::make(256, 3, 1, 1));
  x = b.relu(x, "features.9");
  x = b.conv(x, "features.10", ConvSpec::make(256, 3, 1, 1));
  x = b.relu(x, "features.11");
  x = b.max_pool(x, "features.12", pool);
  // torchvision's AdaptiveAvgPool2d((6, 6)) is the identity at 224x224 (the map is already 6x6) and
  // is left out: other input sizes change classifier.1's input width instead of being resampled.
  x = b.dropout(x, "classifier.0", 0.5f);
  x = b.fc(x, "classifier.1", 4096);
  x = b.relu(x, "classifier.2");
  x = b.dropout(x, "classifier.3", 0.5f);
  x = b.fc(x, "classifier.4", 4096);
  x = b.relu(x, "classifier.5");
  x = b.fc(x, "classifier.6", classes);
  b.softmax_loss(x);
  return b;
}

}  // namespace cnnergy::zoo
