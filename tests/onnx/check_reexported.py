#!/usr/bin/env python3
"""Imported networks written back by `cnnergy export-onnx`: a small ONNX graph of every operator the
importer maps to a layer type of imported networks (Clip, LeakyRelu, Sigmoid, HardSigmoid, x*HardSigmoid(x),
x*Sigmoid(x), the squeeze-and-excitation Mul, Mul/Add/Sub/Div by constants, the channel shuffle's
Reshape-Transpose-Reshape, Split, Slice), made with onnx.helper, and torchvision MobileNet v3 small and
ShuffleNet v2 x0.5 exported by PyTorch (random weights, small input). Each: import -> export ->
onnx.checker.check_model(full_check=True) -> import again, logits of both files by `cnnergy infer`
within 1e-5 x max abs logit (the torchvision ones also against PyTorch's own, within 1e-4).
Exits 77 (ctest SKIP_RETURN_CODE) when python3-onnx is absent; skips the torchvision part without torch.

usage: check_reexported.py CNNERGY_BIN WORK_DIR [--no-torch]
"""
import os
import subprocess
import sys
import time

SKIP = 77
TORCHVISION = {"mobilenet_v3_small": 64, "shufflenet_v2_x0_5": 64}


def small_graph(onnx, np):
    """Every newly mapped operator once, on a (1, 3, 8, 8) input; 5 logits."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = []

    def const(name, value, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def rand(name, *shape, scale=0.5):
        return const(name, rng.normal(0, scale, shape))

    N = helper.make_node
    nodes = [
        N("Conv", ["input", rand("w1", 8, 3, 3, 3), rand("b1", 8)], ["c1"], pads=[1, 1, 1, 1]),
        N("Clip", ["c1", const("lo", -0.5), const("hi", 2.0)], ["clip"]),
        N("LeakyRelu", ["clip"], ["leaky"], alpha=0.1),
        N("Reshape", ["leaky", const("g_shape", [1, 2, 4, 8, 8], np.int64)], ["grouped"]),
        N("Transpose", ["grouped"], ["swapped"], perm=[0, 2, 1, 3, 4]),
        N("Reshape", ["swapped", const("c_shape", [1, 8, 8, 8], np.int64)], ["shuffled"]),
        N("Split", ["shuffled", const("split", [4, 4], np.int64)], ["a", "b"], axis=1),
        N("HardSigmoid", ["a"], ["a_gate"], alpha=1.0 / 6.0, beta=0.5),
        N("Mul", ["a", "a_gate"], ["a_hswish"]),
        N("Sigmoid", ["b"], ["b_gate"]),
        N("Mul", ["b", "b_gate"], ["b_silu"]),
        N("Concat", ["a_hswish", "b_silu"], ["cat"], axis=1),
        N("Mul", ["cat", const("scale", rng.uniform(0.5, 1.5, (1, 8, 1, 1)))], ["scaled"]),
        N("Add", ["scaled", const("shift", rng.uniform(-0.3, 0.3, (8, 1, 1)))], ["shifted"]),
        N("GlobalAveragePool", ["shifted"], ["pooled"]),
        N("Conv", ["pooled", rand("w2", 8, 8, 1, 1), rand("b2", 8)], ["se"]),
        N("Sigmoid", ["se"], ["se_gate"]),
        N("Mul", ["shifted", "se_gate"], ["excited"]),
        N("HardSigmoid", ["excited"], ["hsig"], alpha=0.2, beta=0.5),
        N("Slice", ["hsig", const("starts", [1], np.int64), const("ends", [7], np.int64),
                    const("axes", [1], np.int64)], ["sliced"]),
        N("Sub", ["sliced", const("sub", 0.25)], ["centred"]),
        N("Div", ["centred", const("div", 0.5)], ["normed"]),
        N("Conv", ["normed", rand("w3", 6, 6, 3, 3), rand("b3", 6)], ["c3"], pads=[1, 1, 1, 1]),
        N("GlobalAveragePool", ["c3"], ["p3"]),
        N("Flatten", ["p3"], ["flat"], axis=1),
        N("Gemm", ["flat", rand("fc_w", 5, 6, scale=1.0), rand("fc_b", 5)], ["logits"], transB=1),
    ]
    graph = helper.make_graph(nodes, "new_ops", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    return model


def infer(cnnergy, model, x_path, y_path, np):
    run = subprocess.run([cnnergy, "infer", model, "--device", "cpu", "--inputs", x_path, "--outputs", y_path,
                          "--batch", "2"], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"infer {model} exited {run.returncode}: {(run.stderr or run.stdout).strip()[-300:]}")
    return np.load(y_path)


def round_trip(cnnergy, work, name, src, x, np, onnx, reference=None):
    """src -> export-onnx -> checker; logits of src and of the export. Returns a one-line verdict or raises."""
    out = os.path.join(work, name + "_re.onnx")
    run = subprocess.run([cnnergy, "export-onnx", src, out], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"export-onnx exited {run.returncode}: {(run.stderr or run.stdout).strip()[-300:]}")
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    ops = sorted({n.op_type for n in model.graph.node})
    x_path = os.path.join(work, name + "_x.npy")
    np.save(x_path, x.astype(np.float32))
    first = infer(cnnergy, src, x_path, os.path.join(work, name + "_y1.npy"), np)
    second = infer(cnnergy, out, x_path, os.path.join(work, name + "_y2.npy"), np)
    scale = float(np.abs(first).max())
    diff = float(np.abs(first - second).max())
    if not (scale > 0 and diff <= 1e-5 * scale):
        raise ValueError(f"re-exported logits differ by {diff:.3g} (max abs logit {scale:.3g})")
    note = f"re-export diff {diff:.3g} (max abs logit {scale:.3g})"
    if reference is not None:
        ref_diff = float(np.abs(first - reference).max())
        ref_scale = float(np.abs(reference).max())
        if not ref_diff <= 1e-4 * ref_scale:
            raise ValueError(f"logits differ from PyTorch's by {ref_diff:.3g} (max abs {ref_scale:.3g})")
        note += f", vs PyTorch {ref_diff:.3g}"
    return f"{note}; opset {model.opset_import[0].version}, {len(model.graph.node)} nodes, ops {' '.join(ops)}"


def main():
    try:
        import numpy as np
        import onnx
        import onnx.checker
    except ImportError as e:
        print(f"SKIP: {e} (install python3-onnx)")
        return SKIP
    cnnergy, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    failures, done = 0, 0
    cases = [("new_ops", None)]
    torch = None
    if "--no-torch" not in sys.argv[3:]:
        try:
            import torch
            import torchvision
            cases += [(name, size) for name, size in TORCHVISION.items()]
        except ImportError as e:
            print(f"note: torchvision part skipped: {e}")
    for name, size in cases:
        start = time.monotonic()
        try:
            if size is None:
                src = os.path.join(work, name + ".onnx")
                onnx.save(small_graph(onnx, np), src)
                x = np.random.default_rng(1).normal(0, 1, (4, 3, 8, 8))
                verdict = round_trip(cnnergy, work, name, src, x, np, onnx)
            else:
                sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
                from torchvision_compare import calibrate_batch_norm
                torch.manual_seed(0)
                model = getattr(torchvision.models, name)()
                calibrate_batch_norm(torch, model, size)
                xt = torch.randn(4, 3, size, size)
                with torch.no_grad():
                    ref = model(xt).numpy()
                src = os.path.join(work, name + ".onnx")
                torch.onnx.export(model, xt[:1], src, opset_version=13, input_names=["input"],
                                  output_names=["logits"], do_constant_folding=True)
                verdict = round_trip(cnnergy, work, name, src, xt.numpy(), np, onnx, reference=ref)
            print(f"ok   {name}: {verdict}, {time.monotonic() - start:.0f} s")
            done += 1
        except Exception as e:  # the checker's exception types vary between versions
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            failures += 1
    print(f"{done}/{len(cases)} re-exported models pass onnx.checker (full_check) and give the same logits")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
