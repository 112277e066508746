#!/usr/bin/env python3
"""Search the readings of Castro et al. 2019's Section 4.1 that could produce their Table 1.

The paper's text leaves choices open (conv1 stride and padding, max pooling, the "adapter
convolution" before each residual stage, whether batch-norm and ReLU outputs count, the output-size
formula with or without +1). This script enumerates them for the gait ResNet and for ResNetIm, counts
each reading with the rules `model-info` uses (src/layers/workload.hpp: Eq. 1 operations per
multiply-accumulate, Eq. 8 read = input + all weights, Eq. 9 written = output; batch norm 2 per
element, ReLU 1, add 1, MiB at 4 bytes per element), and prints the readings closest to the table
and the range of operations per written element, which hardly depends on the input size.
docs/model-info.md ("Table 1, row by row") explains the results; tests/zoo/test_model_info.cpp
holds the zoo's chosen readings to the table with the engine's own counts.

Usage: python3 tools/table1_readings.py [gait_resnet|resnetim] [--top N]
"""
import argparse
import itertools

ELEMENTS_PER_MIB = 2**20 / 4
TABLE1 = {  # operations, read MiB, written MiB (Castro et al. 2019, Table 1)
    "gait_resnet": (425.13e6, 87.6, 4.8),
    "resnetim": (2080.96e6, 97.1, 46.6),
}
NETWORKS = {  # input channels, side, classes, blocks per stage
    "gait_resnet": (50, [60], 155, (4, 6, 7, 2)),
    "resnetim": (3, [160, 192, 224, 227, 256], 1000, (3, 4, 6, 3)),
}


def count(cin, side, classes, blocks, conv1_stride, conv1_pad, pool, adapter, adapter1_stride, bn, relu,
          plus1, projection):
    """Operations, read MiB, written MiB and the last map's side of one reading (None if it empties)."""
    layers = []  # (operations, read elements, written elements)

    def out_side(h, k, s, p):
        return (h - k + 2 * p) // s + (1 if plus1 else 0)

    def conv(c, h, k, s, p, co):
        ho = out_side(h, k, s, p)
        if ho < 1:
            raise ValueError
        layers.append((k * k * ho * ho * c * co, c * h * h + k * k * c * co, ho * ho * co))
        return co, ho

    def after_conv(c, h, with_relu=True):
        if bn:
            layers.append((2 * c * h * h, c * h * h + 2 * c, c * h * h))
        if relu and with_relu:
            layers.append((c * h * h, c * h * h, c * h * h))

    c, h = conv(cin, side, 7, conv1_stride, conv1_pad, 64)
    after_conv(c, h)
    if pool:
        k, s, p = pool
        ho = out_side(h, k, s, p)
        if ho < 1:
            raise ValueError
        layers.append((k * k * ho * ho * c, c * h * h, c * ho * ho))
        h = ho
    for stage, n in enumerate(blocks):
        width = 64 << stage
        stride = adapter1_stride if stage == 0 else 2
        if adapter:
            c, h = conv(c, h, adapter, stride, (adapter - 1) // 2, width)
            after_conv(c, h)
            stride = 1
        for b in range(n):
            c0, h0, st = c, h, (stride if b == 0 else 1)
            c, h = conv(c, h, 3, st, 1, width)
            after_conv(c, h)
            c, h = conv(c, h, 3, 1, 1, width)
            after_conv(c, h, with_relu=False)
            if projection and (c0 != c or h0 != h):
                conv(c0, h0, 1, st, 0, width)
            layers.append((c * h * h, 2 * c * h * h, c * h * h))  # the sum
            if relu:
                layers.append((c * h * h, c * h * h, c * h * h))
    layers.append((c * h * h, c * h * h, c))  # global average pooling
    layers.append((c * classes, c + c * classes + classes, classes))  # fc
    layers.append((3 * classes, classes, classes))  # softmax (Eq. 7)
    ops = sum(x[0] for x in layers)
    return ops, sum(x[1] for x in layers) / ELEMENTS_PER_MIB, sum(x[2] for x in layers) / ELEMENTS_PER_MIB, h


def readings(network):
    cin, sides, classes, blocks = NETWORKS[network]
    space = itertools.product(sides, [1, 2, 3, 4], [0, 3], [None, (2, 2, 0), (3, 2, 0), (3, 2, 1)],
                              [None, 1, 2, 3], [1, 2], [True, False], [True, False], [True, False],
                              [True, False])
    for side, s1, p1, pool, adapter, a1, bn, relu, plus1, proj in space:
        if (adapter and proj) or (not adapter and a1 == 2):
            continue
        try:
            ops, rd, wr, last = count(cin, side, classes, blocks, s1, p1, pool, adapter, a1, bn, relu, plus1, proj)
        except ValueError:
            continue
        yield ops, rd, wr, last, dict(side=side, conv1_stride=s1, conv1_pad=p1, max_pool=pool,
                                      adapter_kernel=adapter, adapter1_stride=a1, batch_norm=bn,
                                      relu_counted=relu, plus_one=plus1, projection=proj)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("network", nargs="?", choices=sorted(TABLE1), default="gait_resnet")
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    t_ops, t_rd, t_wr = TABLE1[args.network]
    found = []
    ratios = []
    for ops, rd, wr, last, how in readings(args.network):
        err = max(abs(ops / t_ops - 1), abs(rd / t_rd - 1), abs(wr / t_wr - 1))
        found.append((err, ops, rd, wr, last, how))
        ratios.append(ops / (wr * ELEMENTS_PER_MIB))
    found.sort(key=lambda x: x[0])
    print(f"{args.network}: {len(found)} readings; Table 1: {t_ops / 1e6:.2f} M operations, {t_rd} MiB read, "
          f"{t_wr} MiB written, {t_ops / (t_wr * ELEMENTS_PER_MIB):.1f} operations per written element")
    print(f"operations per written element over all readings: {min(ratios):.1f} .. {max(ratios):.1f}")
    for err, ops, rd, wr, last, how in found[:args.top]:
        print(f"  worst column {100 * err:5.1f}%  {ops / 1e6:8.2f} M  read {rd:7.2f}  written {wr:6.2f}  "
              f"last map {last}x{last}  {how}")


if __name__ == "__main__":
    main()
