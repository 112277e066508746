// Host-callable launchers for the backend's own CUDA kernels (implemented in the .cu files, called
// from the .cpp files that g++ compiles). Pointers are device pointers; element types are passed as
// DType values and resolved once per launch (the hot kernels are templated on the storage type and
// move 16-byte packs where the pointers are 16-byte aligned; all arithmetic is fp32 or wider).
// Every launcher enqueues on `stream`, checks the launch, never waits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.hpp"

namespace cnnergy::cuda::kernels {

// A 4-D activation geometry (logical N, C, H, W) and its memory layout. 2-D (N, F) tensors are
// described as N, F, 1, 1 (any layout reads the same then).
struct Dims {
  std::int64_t n = 1, c = 1, h = 1, w = 1;
  bool nhwc = false;
  std::int64_t numel() const { return n * c * h * w; }
};

// How a per-channel reduction or broadcast sees a tensor: element (o, ch, i) lives at
// o * channels * inner + ch * inner + i. NCHW: outer = N, inner = H*W. NHWC and 2-D: outer = N*H*W,
// inner = 1 (channel-fastest).
struct ChannelView {
  std::int64_t outer = 1, channels = 1, inner = 1;
  std::int64_t per_channel() const { return outer * inner; }
};
inline ChannelView channel_view(const Dims& d) {
  if (d.nhwc || (d.h == 1 && d.w == 1)) return {d.n * d.h * d.w, d.c, 1};
  return {d.n, d.c, d.h * d.w};
}

// True when `channels` elements of `dtype` fill whole 16-byte packs (8 fp16/bf16 or 4 fp32): the
// condition for the vectorised channel-last batch-norm and pooling kernels (with 16-byte aligned
// pointers, which the allocator's buffers are).
inline bool fills_packs(std::int64_t channels, DType dtype) {
  if (dtype == DType::kI32) return false;
  const auto per_pack = static_cast<std::int64_t>(16 / dtype_size_bytes(dtype));
  return channels > 0 && channels % per_pack == 0;
}

// True when the batch norm's NCHW kernels (batch_norm_planes.cu) take a channel-first view: a
// floating-point dtype, planes of more than one value, under 2^31 elements (32-bit indices).
inline bool plane_path_takes(const ChannelView& v, DType dtype) {
  return dtype != DType::kI32 && v.inner > 1 && v.outer >= 1 && v.channels >= 1 &&
         v.outer * v.channels * v.inner < (std::int64_t{1} << 31);
}

// ---- element-wise (elementwise.cu) -------------------------------------------------------------
// dst = src (or dst += src when accumulate), converting dtype and, for 4-D, layout
// (src_nhwc / dst_dims.nhwc).
void convert(const void* src, DType src_dtype, bool src_nhwc, void* dst, DType dst_dtype,
             const Dims& dst_dims, bool accumulate, cudaStream_t stream);
void fill(void* dst, DType dtype, std::int64_t count, float value, cudaStream_t stream);
// y = a + b, or max(0, a + b) with relu.
void add(const void* a, const void* b, void* y, DType dtype, std::int64_t count,
         cudaStream_t stream, bool relu = false);
void relu_forward(const void* x, void* y, DType dtype, std::int64_t count, cudaStream_t stream);
void relu_backward(const void* y, const void* dy, void* dx, DType dtype, std::int64_t count,
                   bool accumulate, cudaStream_t stream);
// Element j's random number is drawn for its logical NCHW index, so masks do not depend on layout
// and equal the CPU backend's.
void dropout_forward(const void* x, void* mask, void* y, DType dtype, const Dims& dims, float p,
                     std::uint64_t seed, cudaStream_t stream);
void dropout_backward(const void* dy, const void* mask, void* dx, DType dtype, std::int64_t count,
                      bool accumulate, cudaStream_t stream);
// rows x cols block copy between row-major matrices with leading dimensions (concat along
// channels).
void copy_2d(const void* src, std::int64_t src_ld, void* dst, std::int64_t dst_ld,
             std::int64_t rows, std::int64_t cols, DType dtype, bool accumulate,
             cudaStream_t stream);
// Zero-padded copy (pad_top/left rows/cols before, the rest after) and its adjoint crop.
void pad_2d(const void* x, const Dims& x_dims, void* xp, const Dims& xp_dims, std::int64_t pad_top,
            std::int64_t pad_left, DType dtype, cudaStream_t stream);
void crop_2d(const void* xp, const Dims& xp_dims, void* x, const Dims& x_dims, std::int64_t pad_top,
             std::int64_t pad_left, DType dtype, bool accumulate, cudaStream_t stream);
// y[.., c, ..] += b[c] (b in the same dtype as y); relu: then y = max(0, y) in the same pass (the
// inference convolution's fused ReLU: rounding commutes with max(0, .), so the values are the pair's).
void bias_add(void* y, const void* b, DType dtype, const ChannelView& view, cudaStream_t stream,
              bool relu = false);

struct SgdParams {
  float learning_rate, momentum, weight_decay, inv_grad_scale;
};
// master, momentum (null for plain SGD): fp32; grad in grad_dtype; working (may be null) refreshed
// in working_dtype. Does nothing when skip (may be null) holds non-zero: read on the device, no
// host round trip.
void sgd_update(float* master, const void* grad, DType grad_dtype, float* momentum, void* working,
                DType working_dtype, std::int64_t count, const SgdParams& params,
                const std::int32_t* skip, cudaStream_t stream);
// Many parameters in one launch (Backend::sgd_update_all): entries and chunks in device memory
// (SgdTables uploads them); block b updates chunk b of its entry as sgd_update would (bit for bit),
// with the entry's weight decay (params.weight_decay unused). All entries share grad_dtype and
// working_dtype (kF32 where working is null); vector: the entry's operands allow 16-byte packs
// (sgd_entry_packs). Chunks start at multiples of 4 elements.
struct SgdEntry {
  float* master = nullptr;
  const void* grad = nullptr;
  float* momentum = nullptr;
  void* working = nullptr;
  std::int64_t count = 0;
  float weight_decay = 0.0f;
  std::int32_t vector = 0;
};
struct SgdChunk {
  std::int64_t entry = 0, begin = 0, end = 0;
};
constexpr std::int64_t kSgdChunkElements = std::int64_t{1} << 15;
bool sgd_entry_packs(const SgdEntry& e, DType grad_dtype, DType working_dtype);
void sgd_update_many(const SgdEntry* entries, const SgdChunk* chunks, std::int64_t num_chunks, DType grad_dtype,
                     DType working_dtype, const SgdParams& params, const std::int32_t* skip, cudaStream_t stream);
// *flag = 1 when any element is Inf or NaN (flag is left alone otherwise).
void check_finite(const void* t, DType dtype, std::int64_t count, std::int32_t* flag,
                  cudaStream_t stream);
// ---- loss head (loss.cu) ------------------------------------------------------------------------
// *correct += rows whose label's logit has fewer than k logits strictly above it.
void count_topk(const void* logits, DType dtype, const std::int32_t* labels, std::int64_t rows,
                std::int64_t classes, int k, std::int32_t* correct, cudaStream_t stream);
// probs (fp32) = softmax(logits); loss[0] = mean over rows of logsumexp - logit[label]; row_loss is
// scratch of `rows` floats. An out-of-range label makes that row's loss (and the mean) NaN.
void softmax_xent_forward(const void* logits, DType dtype, const std::int32_t* labels, float* probs,
                          float* row_loss, float* loss, std::int64_t rows, std::int64_t classes,
                          cudaStream_t stream);
void softmax_xent_backward(const float* probs, const std::int32_t* labels, float scale,
                           void* dlogits, DType dtype, std::int64_t rows, std::int64_t classes,
                           cudaStream_t stream);

// ---- per-channel reductions and batch norm (batch_norm.cu) --------------------------------------
// Bytes of scratch the per-channel reductions below need for `view` of `dtype` elements (on the
// current device: the plan depends on its multiprocessor count).
std::size_t channel_reduce_scratch_bytes(const ChannelView& view, DType dtype);
// db[c] = sum of dy over everything but the channel (db in db_dtype).
void bias_grad(const void* dy, DType dtype, const ChannelView& view, void* db, DType db_dtype,
               void* scratch, cudaStream_t stream);
// A ReLU's backward and the bias gradient of the layer before it: dy = dy where y > 0, else 0, in
// place, then db[c] = the masked dy's sum as bias_grad gives it. One pass over dy where the fast
// channel-last reduction applies (channels a multiple of 16 bytes' elements, 16-byte aligned), the
// two passes otherwise; the same values either way, bit for bit.
void relu_backward_bias_grad(const void* y, void* dy, DType dtype, const ChannelView& view, void* db,
                             DType db_dtype, void* scratch, cudaStream_t stream);

struct BatchNormParams {
  double eps, momentum;
  bool relu = false;  // a ReLU fused into the output (BatchNormDesc::relu)
  // The fused residual add's other input (BatchNormDesc::residual; x's dtype and view): forward
  // writes act(round(bn(x)) + z), act the ReLU where relu is set; null: no residual. Backward
  // takes no residual (its dy is the gradient of bn(x)).
  const void* residual = nullptr;
  // With a residual add and a ReLU, training on the tiled path: where forward also writes its output's
  // mask (batch_norm_relu_mask_bytes bytes: a byte per row and 16-byte pack of channels, bit k set
  // where element k was stored positive), for batch_norm_backward_masking to read in place of y.
  // Null: none written.
  std::uint8_t* relu_mask = nullptr;
};
// Bytes of BatchNormParams::relu_mask for this view (1/16 of the tensor's); 0 where the view takes no
// tiled path (forward never writes a mask there).
std::size_t batch_norm_relu_mask_bytes(const ChannelView& view, DType dtype);
// The batch norm of the contract (fp32 parameters and statistics; x/y in dtype). Channel-last
// views (NHWC, 2-D) with C a multiple of 16 bytes' worth of elements run tiled, vectorised kernels
// with fp32 sums about a per-channel shift, finished in fp64; other views run generic kernels with
// fp64 sums. sums (optional): x's per-channel sum then sum of squares (fp32, 2C), from the
// convolution that wrote x; the statistics are then finished from them and x is read once.
// Returns whether it wrote params.relu_mask.
// y null (saved_coef given, no residual): the statistics, running averages, saved values and
// coefficients alone, with the reduction y's 16-byte alignment would choose; a max pool applies the
// coefficients as it reads x (PoolNormalisation) and nothing writes y.
bool batch_norm_forward_training(const void* x, void* y, DType dtype, const ChannelView& view,
                                 const float* gamma, const float* beta, float* running_mean,
                                 float* running_var, float* saved_mean, float* saved_inv_std,
                                 const BatchNormParams& params, void* scratch, cudaStream_t stream,
                                 float* saved_coef = nullptr, const float* sums = nullptr);
// The statistics pass of batch_norm_forward_training alone (its partial sums, into scratch): what
// a convolution that computes them in its epilogue saves, for the verdict that chooses it.
void batch_norm_statistics_pass(const void* x, DType dtype, const ChannelView& view, void* scratch,
                                cudaStream_t stream);
// forward_training's output again from the same x with the coefficients it kept (saved_coef):
// y = relu?(x * scale + shift), the apply pass alone, bit for bit what forward wrote.
void batch_norm_reapply(const void* x, void* y, DType dtype, const ChannelView& view, const float* coef,
                        bool relu, cudaStream_t stream);
// The evaluation coefficients forward_inference applies (coef: fp32 scale[C] then shift[C]), for a
// max pool to apply (PoolNormalisation).
void batch_norm_inference_coefficients(std::int64_t channels, const float* gamma, const float* beta,
                                       const float* running_mean, const float* running_var, double eps,
                                       float* coef, cudaStream_t stream);
void batch_norm_forward_inference(const void* x, void* y, DType dtype, const ChannelView& view,
                                  const float* gamma, const float* beta, const float* running_mean,
                                  const float* running_var, const BatchNormParams& params,
                                  void* scratch, cudaStream_t stream);
// relu_coef: where forward_training with saved_coef kept its coefficients (2C floats); dy is then
// the gradient of the fused ReLU's output. Null: no ReLU.
void batch_norm_backward(const void* x, const void* dy, void* dx, DType dtype,
                         const ChannelView& view, const float* gamma, const float* saved_mean,
                         const float* saved_inv_std, float* dgamma, float* dbeta,
                         const float* relu_coef, bool accumulate, void* scratch,
                         cudaStream_t stream);
// backward of a batch norm with a fused residual add and ReLU, with the add's ReLU backward: dy (the
// add's output gradient) is masked where y (the add's output, forward's y) is not positive and
// written back masked (the add's other input shares it), then backward as above on it. One pass for
// the mask and the sums on the tiled (channel-last) and plane (NCHW) paths; otherwise relu_backward
// then backward. relu_mask: the mask forward_training wrote of this y (BatchNormParams::relu_mask),
// read in place of y on the tiled path (the same values, 1/16 of the bytes); null: y is read.
void batch_norm_backward_masking(const void* x, const void* y, void* dy, void* dx, DType dtype,
                                 const ChannelView& view, const float* gamma, const float* saved_mean,
                                 const float* saved_inv_std, float* dgamma, float* dbeta, bool accumulate,
                                 void* scratch, cudaStream_t stream, const std::uint8_t* relu_mask = nullptr);

// ---- pooling (pool.cu) and LRN (lrn.cu) --------------------------------------------------------------
struct PoolParams {
  std::int64_t out_h, out_w, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  int mode;  // 0 max, 1 average including padding (window clipped to [-pad, in + pad)), 2 excluding
};
// A batch norm's normalisation that max pooling applies as it reads its input (the batch norm's input,
// whose output is never written): coef is the batch norm's fp32 scale[C] then shift[C] (batch_norm.cu's
// coefficients), relu its fused ReLU. Each value compared is round(relu?(x * scale + shift)), bit for
// bit what the batch norm's apply pass would have stored. Null coef: the input as it is.
struct PoolNormalisation {
  const float* coef = nullptr;
  bool relu = false;
};
// argmax (max pooling with pool_backward_scratch_bytes > 0; may be null): also written, the bytes
// pool_backward's argmax pass would write, for a later pool_backward to take as kept_argmax.
// normalise (max pooling only): see PoolNormalisation.
void pool_forward(const void* x, const Dims& x_dims, void* y, DType dtype, const PoolParams& p,
                  cudaStream_t stream, std::uint8_t* argmax = nullptr, const PoolNormalisation& normalise = {});
// Scratch the backward needs (max pooling: one byte per output for the window argmax; 0 for
// average pooling and for max windows of more than 255 elements, whose argmax is recomputed).
std::size_t pool_backward_scratch_bytes(const Dims& x_dims, const PoolParams& p);
// kept_argmax: what pool_forward wrote as argmax from this x; then no argmax pass runs, x is not read
// (may be null) and scratch is unused. relu_y (max pooling with kept_argmax only): the pool's output y;
// a window's gradient reaches its argmax only where y > 0, the mask of the ReLU before the pool
// (Pool2dDesc::relu_mask: at the argmax the ReLU's output is y), bit for bit that ReLU's backward
// applied after this one's (the windows holding an input share its value, so all of them or none add).
void pool_backward(const void* x, const void* dy, void* dx, const Dims& x_dims, DType dtype,
                   const PoolParams& p, bool accumulate, void* scratch, cudaStream_t stream,
                   const std::uint8_t* kept_argmax = nullptr, const void* relu_y = nullptr);

struct LrnParams {
  std::int64_t size;
  double alpha, beta, k;
};
void lrn_forward(const void* x, void* y, const Dims& dims, DType dtype, const LrnParams& p,
                 cudaStream_t stream);
void lrn_backward(const void* x, const void* y, const void* dy, void* dx, const Dims& dims,
                  DType dtype, const LrnParams& p, bool accumulate, cudaStream_t stream);

// ---- space-to-depth (space_to_depth.cu): a stride-S convolution's input and weights rearranged so
// it runs as a stride-1 convolution over cs >= C*S*S channels (conv_space_to_depth.hpp).
struct SpaceToDepthGeom {
  std::int64_t n = 1, c = 1, h = 1, w = 1;  // the original input (NHWC)
  std::int64_t k = 1, r = 1, s = 1;         // output channels, the original kernel
  std::int64_t stride = 2, pad_top = 0, pad_left = 0;
  std::int64_t cs = 1, hs = 1, ws = 1;      // the rearranged input: channels (padded), blocks
  std::int64_t rs = 1, ss = 1;              // the rearranged kernel: ceil(R / S) x ceil(Sk / S)
};
void space_to_depth_input(const void* x, void* xs, DType dtype, const SpaceToDepthGeom& g, cudaStream_t stream);
void space_to_depth_weights(const void* w, void* ws, DType dtype, bool nhwc, const SpaceToDepthGeom& g,
                            cudaStream_t stream);
// The inverse map for gradients: the original weights' gradient dw (K C R S logical, `nhwc` as the
// weights) from the rearranged convolution's dws; overwrites dw.
void space_to_depth_weights_grad(const void* dws, void* dw, DType dtype, bool nhwc, const SpaceToDepthGeom& g,
                                 cudaStream_t stream);

}  // namespace cnnergy::cuda::kernels
