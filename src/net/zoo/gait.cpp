// The two gait-recognition networks of Castro et al. 2019 (Section 4.1, Fig. 1 a-b), for optical-flow volumes
// of 25 frames x 2 flow components at 60x60 (input C=50, H=W=60). Class count: TUM-GAID's
// identification protocol (Hofmann et al. 2014, Castro et al. 2019 ref. [55]) classifies the 155 test subjects
// (305 in all, 150 for training the features), so 155 by default; override with --classes.
// Where the paper is silent or ambiguous, the choice made is written next to the layer.
#include <array>

#include "net/zoo/common.hpp"
#include "net/zoo/families.hpp"

namespace cnnergy::zoo {
namespace {

// Castro et al. 2019, Section 7.4: "dropout to 0.4 (when required)" for the gait networks.
constexpr float kGaitDropout = 0.4f;
constexpr double kBnEps = 1e-5;

}  // namespace

// 2D-CNN (Castro et al. 2019, Fig. 1a, after their ref. [46]), in the reading that reproduces their
// Table 1 (docs/model-info.md, "Table 1, row by row"): conv4 (4096 filters of 2x2 on the 2x2 map left
// by pool3) IS the first 4096-unit fully connected layer, the table's "full5"; there is no second
// 4096-unit layer. Operations 784.09 M (table 783.84 M) and read 74.72 MiB (73.8) agree within 1.2%;
// with a separate full5 they would be 800.87 M and 138.8 MiB. The layer count points the same way:
// this list has 16 layers (conv, ReLU, pool x 3; conv4, ReLU, dropout; full6, ReLU, dropout; softmax),
// the text's with a separate full5 19, and Sec. 4.1's title says 15.
// Max pooling 2x2 with stride 2 (non-overlapping: the paper gives the window only); ReLU after every
// convolution (stated) and after full6 (AlexNet-like); dropout after conv4 (full5's) and full6.
// At 50x60x60: 54 -> 27 -> 12 -> 6 -> 4 -> 2 -> 1.
GraphBuilder gait_2dcnn(const Shape& input, std::int64_t classes) {
  GraphBuilder b("gait_2dcnn", input, classes);
  const PoolSpec pool = PoolSpec::make(2, 2);
  Node x = b.conv(b.input(), "conv1", ConvSpec::make(96, 7, 1));
  x = b.relu(x, "relu1");
  x = b.max_pool(x, "pool1", pool);
  x = b.conv(x, "conv2", ConvSpec::make(192, 5, 2));
  x = b.relu(x, "relu2");
  x = b.max_pool(x, "pool2", pool);
  x = b.conv(x, "conv3", ConvSpec::make(512, 3, 1));
  x = b.relu(x, "relu3");
  x = b.max_pool(x, "pool3", pool);
  x = b.conv(x, "conv4", ConvSpec::make(4096, 2, 1));  // = full5: 4096 units over the 2x2x512 map
  x = b.relu(x, "relu4");
  x = b.dropout(x, "drop4", kGaitDropout);
  x = b.fc(x, "full6", 2048);
  x = b.relu(x, "relu6");
  x = b.dropout(x, "drop6", kGaitDropout);
  x = b.fc(x, "fc_out", classes);
  b.softmax_loss(x);
  return b;
}

// Gait ResNet (Castro et al. 2019, Fig. 1b, "as defined in [47]", i.e. He et al. 2016), in the
// reading closest to their Table 1 (docs/model-info.md): conv1 64 7x7 with stride 2, as in every He et
// al. network (the text's "stride 1" cannot be: that conv1 alone, 564.5 M operations, exceeds the
// table's whole 425.13 M) + BN + ReLU, max pool 3x3 stride 2 (padding 1); then for each of the four
// stages an "adapter convolution to resize the input to that of the next block" (3x3 + BN + ReLU,
// stride 1 before ResB1, 2 before the others) and 4/6/7/2 basic residual blocks (3x3, stride 1) of
// 64/128/256/512 filters. 60 -> 30 -> 15 -> 15 -> 8 -> 4 -> 2: the last map is the 2x2 that the
// paper's "global average pooling 2x2" pools. Read 88.38 MiB and written 4.77 MiB agree with the
// table (87.6, 4.8) within 1%; operations are 514.49 M against 425.13 M (see the docs for why no
// reading matches all three).
GraphBuilder gait_resnet(const Shape& input, std::int64_t classes) {
  GraphBuilder b("gait_resnet", input, classes);
  BatchNormSpec bn;
  bn.eps = kBnEps;
  Node x = conv_bn_relu(b, b.input(), "conv1", 64, 7, 2, 3, kBnEps);
  x = b.max_pool(x, "pool1", PoolSpec::make(3, 2, 1));
  constexpr std::array<int, 4> kBlocks = {4, 6, 7, 2};
  for (int stage = 0; stage < 4; ++stage) {
    const std::int64_t width = std::int64_t{64} << stage;
    const std::string s = "resb" + std::to_string(stage + 1);
    x = conv_bn_relu(b, x, s + ".adapter", width, 3, stage == 0 ? 1 : 2, 1, kBnEps);
    for (int i = 0; i < kBlocks[static_cast<std::size_t>(stage)]; ++i) {
      const std::string n = s + "." + std::to_string(i);
      Node y = b.conv(x, n + ".conv1", ConvSpec::make(width, 3, 1, 1, 1, false));
      y = b.batch_norm(y, n + ".bn1", bn);
      y = b.relu(y, n + ".relu1");
      y = b.conv(y, n + ".conv2", ConvSpec::make(width, 3, 1, 1, 1, false));
      y = b.batch_norm(y, n + ".bn2", bn);
      y = b.add(y, x, n + ".add");
      x = b.relu(y, n + ".relu");
    }
  }
  x = b.global_avg_pool(x, "pool");
  x = b.fc(x, "fc", classes);
  b.softmax_loss(x);
  return b;
}

}  // namespace cnnergy::zoo
