// Softmax + cross-entropy loss on the CPU: stable softmax (max subtracted), loss = mean over the
// batch of logsumexp(z) - z_label (never log of a rounded-to-zero probability), gradient (p -
// onehot)/N.
#include <cmath>
#include <string>

#include "backend/cpu/cpu_kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cpu {

namespace {

constexpr std::string_view kOp = "softmax_xent";

class SoftmaxXentCpu final : public SoftmaxXentKernel {
 public:
  explicit SoftmaxXentCpu(const SoftmaxXentDesc& d) : d_(d) {}

  void forward(const Tensor& logits, const Tensor& labels, const Tensor& probs,
               const Tensor& loss) override {
    check_matrix(logits, "logits");
    check_i32(labels, kOp, "labels", d_.n);
    check_matrix(probs, "probs");
    check_f32(loss, kOp, "loss", 1);
    check_labels(labels);
    const float* z = cf32(logits);
    float* p = mf32(probs);
    const std::int32_t* lab = labels.data<std::int32_t>();
    const std::int64_t kc = d_.classes;
    double total = 0.0;
    for (std::int64_t i = 0; i < d_.n; ++i) {
      const float* zi = z + i * kc;
      float* pi = p + i * kc;
      double zmax = zi[0];
      for (std::int64_t j = 1; j < kc; ++j) zmax = std::fmax(zmax, static_cast<double>(zi[j]));
      double sum = 0.0;
      for (std::int64_t j = 0; j < kc; ++j) sum += std::exp(zi[j] - zmax);
      const double log_sum = std::log(sum);
      for (std::int64_t j = 0; j < kc; ++j)
        pi[j] = static_cast<float>(std::exp(zi[j] - zmax - log_sum));
      total += zmax + log_sum - zi[lab[i]];
    }
    mf32(loss)[0] = static_cast<float>(total / static_cast<double>(d_.n));
  }

  void backward(const Tensor& probs, const Tensor& labels, float loss_scale,
                const Tensor& dlogits) override {
    check_matrix(probs, "probs");
    check_i32(labels, kOp, "labels", d_.n);
    check_matrix(dlogits, "dlogits");
    check_labels(labels);
    const float* p = cf32(probs);
    float* dz = mf32(dlogits);
    const std::int32_t* lab = labels.data<std::int32_t>();
    const std::int64_t kc = d_.classes;
    const double scale = static_cast<double>(loss_scale) / static_cast<double>(d_.n);
    for (std::int64_t i = 0; i < d_.n; ++i)
      for (std::int64_t j = 0; j < kc; ++j) {
        const double onehot = j == lab[i] ? 1.0 : 0.0;
        dz[i * kc + j] = static_cast<float>(scale * (p[i * kc + j] - onehot));
      }
  }

 private:
  void check_matrix(const Tensor& t, std::string_view name) const {
    check_f32(t, kOp, name, d_.n * d_.classes);
    if (t.shape()[0] != d_.n)
      throw ShapeError("softmax_xent: " + std::string(name) + " has shape " + t.shape().str() +
                       ", expected " + Shape{d_.n, d_.classes}.str());
  }
  void check_labels(const Tensor& labels) const {
    const std::int32_t* lab = labels.data<std::int32_t>();
    for (std::int64_t i = 0; i < d_.n; ++i)
      if (lab[i] < 0 || lab[i] >= d_.classes)
        throw InvalidArgument("softmax_xent: label " + std::to_string(lab[i]) + " of sample " +
                              std::to_string(i) + " is outside [0, " + std::to_string(d_.classes) +
                              ")");
  }

  SoftmaxXentDesc d_;
};

}  // namespace

std::unique_ptr<SoftmaxXentKernel> make_softmax_xent_kernel(const SoftmaxXentDesc& d) {
  check_at_least(d.n, 1, kOp, "batch size");
  check_at_least(d.classes, 1, kOp, "classes");
  return std::make_unique<SoftmaxXentCpu>(d);
}

}  // namespace cnnergy::cpu
