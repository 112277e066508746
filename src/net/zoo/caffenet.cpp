// CaffeNet exactly as BVLC's models/bvlc_reference_caffenet/train_val.prototxt: AlexNet with pooling
// before LRN and the two-tower grouping kept as group=2 convolutions (conv2, conv4, conv5).
// Weights start as the prototxt's fillers: gaussian std 0.01 (fc6/fc7 0.005), biases 0 or 1 (BVLC/caffe
// commit 74bf4b7). 3x227x227, 1000 classes: 60,965,224 parameters. Castro et al. 2019's "CaffeNet".
#include "net/zoo/common.hpp"
#include "net/zoo/families.hpp"

namespace cnnergy::zoo {
namespace {

ConvSpec caffe_conv(std::int64_t out, std::int64_t kernel, std::int64_t stride, std::int64_t pad, std::int64_t groups,
                    float bias_value) {
  ConvSpec s = ConvSpec::make(out, kernel, stride, pad, groups);
  s.init = WeightInit::gaussian(0.01f, bias_value);
  return s;
}

FcSpec caffe_fc(std::int64_t out, float stddev, float bias_value) {
  FcSpec s;
  s.out_features = out;
  s.init = WeightInit::gaussian(stddev, bias_value);
  return s;
}

}  // namespace

GraphBuilder caffenet(const Shape& input, std::int64_t classes) {
  GraphBuilder b("caffenet", input, classes);
  const PoolSpec pool = PoolSpec::make(3, 2, 0, /*ceil_mode=*/true);  // Caffe rounds pooled sizes up
  LrnSpec lrn;  // local_size 5, alpha 1e-4, beta 0.75 (k = 1, Caffe's default)
  lrn.size = 5;
  lrn.alpha = 1e-4;
  lrn.beta = 0.75;
  lrn.k = 1.0;
  Node x = b.conv(b.input(), "conv1", caffe_conv(96, 11, 4, 0, 1, 0.0f));
  x = b.relu(x, "relu1");
  x = b.max_pool(x, "pool1", pool);
  x = b.lrn(x, "norm1", lrn);
  x = b.conv(x, "conv2", caffe_conv(256, 5, 1, 2, /*groups=*/2, 1.0f));
  x = b.relu(x, "relu2");
  x = b.max_pool(x, "pool2", pool);
  x = b.lrn(x, "norm2", lrn);
  x = b.conv(x, "conv3", caffe_conv(384, 3, 1, 1, 1, 0.0f));
  x = b.relu(x, "relu3");
  x = b.conv(x, "conv4", caffe_conv(384, 3, 1, 1, /*groups=*/2, 1.0f));
  x = b.relu(x, "relu4");
  x = b.conv(x, "conv5", caffe_conv(256, 3, 1, 1, /*groups=*/2, 1.0f));
  x = b.relu(x, "relu5");
  x = b.max_pool(x, "pool5", pool);
  x = b.fc(x, "fc6", caffe_fc(4096, 0.005f, 1.0f));
  x = b.relu(x, "relu6");
  x = b.dropout(x, "drop6", 0.5f);
  x = b.fc(x, "fc7", caffe_fc(4096, 0.005f, 1.0f));
  x = b.relu(x, "relu7");
  x = b.dropout(x, "drop7", 0.5f);
  x = b.fc(x, "fc8", caffe_fc(classes, 0.01f, 0.0f));
  b.softmax_loss(x);
  return b;
}

}  // namespace cnnergy::zoo
