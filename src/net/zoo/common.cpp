// Shared zoo building blocks (see common.hpp).
#include "net/zoo/common.hpp"

namespace cnnergy::zoo {

ConvSpec conv_spec(std::int64_t out, std::int64_t kh, std::int64_t kw, std::int64_t stride, std::int64_t pad_h,
                   std::int64_t pad_w, bool bias) {
  ConvSpec s;
  s.out_channels = out;
  s.kernel_h = kh;
  s.kernel_w = kw;
  s.stride_h = s.stride_w = stride;
  s.pad_top = s.pad_bottom = pad_h;
  s.pad_left = s.pad_right = pad_w;
  s.bias = bias;
  return s;
}

Node conv_bn_relu(GraphBuilder& b, Node x, const std::string& prefix, const ConvSpec& spec, double bn_eps) {
  ConvSpec s = spec;
  s.bias = false;
  BatchNormSpec bn;
  bn.eps = bn_eps;
  x = b.conv(x, prefix + ".conv", s);
  x = b.batch_norm(x, prefix + ".bn", bn);
  return b.relu(x, prefix + ".relu");
}

Node conv_bn_relu(GraphBuilder& b, Node x, const std::string& prefix, std::int64_t out, std::int64_t kernel,
                  std::int64_t stride, std::int64_t pad, double bn_eps) {
  return conv_bn_relu(b, x, prefix, conv_spec(out, kernel, kernel, stride, pad, pad, false), bn_eps);
}

}  // namespace cnnergy::zoo
