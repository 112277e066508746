// Per-sample work of one layer in the forward pass: the operation counts and data volumes of
// Castro et al. 2019 (Section 4, Eqs. 1-9), plain FLOPs for forward and backward, and the parameter count.
// Multiply by the batch size for a batch (Eqs. 10-12): Workload::for_batch().
#pragma once

#include <cstdint>

namespace cnnergy {

// Counting rules (per sample; elements, not bytes: multiply by the element size for bytes):
// * operations: Castro et al. 2019, Eqs. 1-7. Conv: k_w*k_h*w_out*h_out*(ch_in/groups)*ch_out
//   multiply-accumulates counted as ONE operation each (Eq. 1, with ch_in per group for grouped
//   convolutions), plus, with a bias, one add per output element (ch_out adds at each output
//   position: the paper's "ch_out add operations" read per position). FC: Eq. 2 (in*out maccs;
//   the paper adds nothing for the bias). Pooling Eq. 3 (window * output elements), ReLU Eq. 4,
//   dropout Eq. 5, batch norm Eq. 6 (2 per element), softmax Eq. 7 (3 per class). Layers the
//   paper does not cover: LRN counts (size + 3) per element (size squares-and-adds, then scale,
//   power, divide); add 1 per output element; concat and flatten 0 (data movement only).
// * flops_forward: 2 per multiply-accumulate (conv, fc), plus 1 per element-wise operation
//   (bias add, max, compare, add, scale); average pooling adds 1 division per output element;
//   batch norm 4 per element at inference shape (subtract, multiply, scale, shift) plus the batch
//   statistics in training (2 per element); LRN as its operation count.
// * flops_backward: conv and fc: 2 * forward MAC flops (data gradient and weight gradient, each as
//   many MACs as the forward) plus the bias gradient (1 per output element); a layer whose input is
//   the network input computes no data gradient, so only the weight gradient counts. Every other
//   layer: about its forward FLOPs (documented per layer in its .cpp).
// * read_elements: Castro et al. 2019, Eq. 8 taken as input elements + ALL weight elements of the layer
//   (K*C/g*R*S + K for conv, in*out + out for fc, 2C for batch norm): the paper's Table 1 CaffeNet
//   read volume (239.1 MB) is the whole model plus activations, so weights count in full.
// * written_elements: Eq. 9, the output elements.
// * parameters: trained parameters (batch-norm running statistics are buffers, not counted).
struct Workload {
  std::int64_t operations = 0;
  std::int64_t flops_forward = 0;
  std::int64_t flops_backward = 0;
  std::int64_t read_elements = 0;
  std::int64_t written_elements = 0;
  std::int64_t parameters = 0;

  Workload& operator+=(const Workload& o) {
    operations += o.operations;
    flops_forward += o.flops_forward;
    flops_backward += o.flops_backward;
    read_elements += o.read_elements;
    written_elements += o.written_elements;
    parameters += o.parameters;
    return *this;
  }
  // Eqs. 10-12: everything but the parameter count scales with the batch.
  Workload for_batch(std::int64_t batch) const {
    Workload w = *this;
    w.operations *= batch;
    w.flops_forward *= batch;
    w.flops_backward *= batch;
    w.read_elements *= batch;
    w.written_elements *= batch;
    return w;
  }
  bool operator==(const Workload&) const = default;
};

}  // namespace cnnergy
