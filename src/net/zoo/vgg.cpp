// VGG-16 and VGG-19 (Simonyan & Zisserman 2015, configurations D and E) as torchvision's vgg16 and
// vgg19 (no batch norm), with torchvision's layer names. 3x224x224, 1000 classes: 138,357,544 and
// 143,667,240 parameters.
#include <vector>

#include "net/zoo/common.hpp"
#include "net/zoo/families.hpp"

namespace cnnergy::zoo {
namespace {

constexpr std::int64_t kPool = 0;  // a max pool in a configuration list

GraphBuilder vgg(const std::string& name, const std::vector<std::int64_t>& config, const Shape& input,
                 std::int64_t classes) {
  GraphBuilder b(name, input, classes);
  Node x = b.input();
  int index = 0;  // torchvision numbers every module of `features`, ReLU and pooling included
  for (const std::int64_t out : config) {
    if (out == kPool) {
      x = b.max_pool(x, "features." + std::to_string(index++), PoolSpec::make(2, 2));
    } else {
      x = b.conv(x, "features." + std::to_string(index++), ConvSpec::make(out, 3, 1, 1));
      x = b.relu(x, "features." + std::to_string(index++));
    }
  }
  // torchvision's AdaptiveAvgPool2d((7, 7)) is the identity at 224x224 and is left out: other input
  // sizes change classifier.0's input width instead of being resampled to 7x7.
  x = b.fc(x, "classifier.0", 4096);
  x = b.relu(x, "classifier.1");
  x = b.dropout(x, "classifier.2", 0.5f);
  x = b.fc(x, "classifier.3", 4096);
  x = b.relu(x, "classifier.4");
  x = b.dropout(x, "classifier.5", 0.5f);
  x = b.fc(x, "classifier.6", classes);
  b.softmax_loss(x);
  return b;
}

}  // namespace

GraphBuilder vgg16(const Shape& input, std::int64_t classes) {
  return vgg("vgg16",
             {64, 64, kPool, 128, 128, kPool, 256, 256, 256, kPool, 512, 512, 512, kPool, 512, 512, 512, kPool},
             input, classes);
}

GraphBuilder vgg19(const Shape& input, std::int64_t classes) {
  return vgg("vgg19",
             {64, 64, kPool, 128, 128, kPool, 256, 256, 256, 256, kPool, 512, 512, 512, 512, kPool, 512, 512, 512,
              512, kPool},
             input, classes);
}

}  // namespace cnnergy::zoo
