#!/usr/bin/env python3
"""Every zoo model written by `cnnergy export-onnx`, checked by ONNX's own checker
(onnx.checker.check_model with full_check=True: the structure, every operator against its opset's
schema, and strict shape inference), and the inferred output shape must be (batch, classes).
Exits 77 (ctest SKIP_RETURN_CODE) when python3-onnx is absent.

usage: check_exported.py CNNERGY_BIN WORK_DIR [model ...]
"""
import os
import re
import subprocess
import sys

SKIP = 77


def zoo_models(cnnergy):
    """The zoo's names, from `cnnergy model-info --list --format json`."""
    import json
    run = subprocess.run([cnnergy, "model-info", "--list", "--format", "json"], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"model-info --list failed: {run.stderr}")
    return [row["model"] for row in json.loads(run.stdout)]


def main():
    try:
        import onnx
        import onnx.checker
        import onnx.shape_inference
    except ImportError as e:
        print(f"SKIP: {e} (install python3-onnx)")
        return SKIP
    cnnergy, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    models = sys.argv[3:] or zoo_models(cnnergy)
    failures = 0
    for k, name in enumerate(models):
        path = os.path.join(work, name + ".onnx")
        batch = ["--batch", "2"] if k % 2 else []  # both forms: fixed and symbolic batch
        run = subprocess.run([cnnergy, "export-onnx", name, path, "--seed", "3"] + batch, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"FAIL {name}: export-onnx exited {run.returncode}: {run.stdout}{run.stderr}")
            failures += 1
            continue
        classes = int(re.search(r"'logits' \([^,]+, (\d+)\)", run.stdout).group(1))
        try:
            model = onnx.load(path)
            onnx.checker.check_model(model, full_check=True)
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
            out = inferred.graph.output[0].type.tensor_type.shape.dim
            dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in out]
            want = [2 if batch else "batch", classes]
            if dims != want:
                raise ValueError(f"output shape {dims}, expected {want}")
            print(f"ok   {name}: opset {model.opset_import[0].version}, IR {model.ir_version}, "
                  f"{len(model.graph.node)} nodes, output {dims}, {os.path.getsize(path) / 2**20:.1f} MiB")
        except Exception as e:  # the checker's own exception types vary between versions
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            failures += 1
        finally:
            os.remove(path)  # the big ones (VGG: > 500 MB) do not stay in the build tree
    print(f"{len(models) - failures}/{len(models)} exported models pass onnx.checker (full_check)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
