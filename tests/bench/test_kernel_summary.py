#!/usr/bin/env python3
"""bench/kernel_summary.py on hand-written Nsight Compute exports: the raw page (a units row, values
in ns with thousands separators) and the details page (==PROF== lines first, a unit per row)."""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # keep the source tree clean under ctest
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import kernel_summary as ks  # noqa: E402

RAW = os.path.join(HERE, "ncu_raw.csv")
DETAILS = os.path.join(HERE, "ncu_details.csv")


def by_category(summary):
    return {c["category"]: c for c in summary["categories"]}


class KernelSummaryTest(unittest.TestCase):
    def test_raw_page(self):
        s = ks.summarize(RAW, 25)
        self.assertEqual(s["kernels"], 11)
        self.assertAlmostEqual(s["total_ms"], 2.279212, places=6)
        c = by_category(s)
        self.assertEqual(c["convolution"]["kernels"], 2)
        self.assertAlmostEqual(c["convolution"]["total_ms"], 2.0, places=9)
        self.assertAlmostEqual(c["batch norm"]["total_ms"], 0.1096, places=9)
        for name, n in [("elementwise", 1), ("pooling", 1), ("gemm", 1), ("loss/softmax", 1),
                        ("copy/transpose", 1), ("optimizer", 1), ("other", 1), ("triton fused", 0)]:
            self.assertEqual(c[name]["kernels"], n, name)
        self.assertAlmostEqual(sum(x["percent"] for x in s["categories"]), 100.0, places=6)
        self.assertEqual(s["top"][0]["count"], 2)  # the two launches of one convolution kernel

    def test_details_page(self):
        s = ks.summarize(DETAILS, 3)
        self.assertEqual(s["kernels"], 8)
        self.assertAlmostEqual(s["total_ms"], 2.527, places=9)
        c = by_category(s)
        self.assertAlmostEqual(c["triton fused"]["total_ms"], 0.2, places=9)
        self.assertAlmostEqual(c["copy/transpose"]["total_ms"], 0.002, places=9)
        self.assertAlmostEqual(c["optimizer"]["total_ms"], 0.2, places=9)
        self.assertEqual(c["batch norm"]["kernels"], 1)
        self.assertEqual(c["pooling"]["kernels"], 1)
        self.assertEqual(len(s["top"]), 3)

    def test_categories(self):
        cases = {
            "void cnnergy::cuda::kernels::(anonymous namespace)::bn_stats_finish_kernel(int)": "batch norm",
            "void cnnergy::cuda::kernels::(anonymous namespace)::convert_generic_kernel(const void *)": "copy/transpose",
            "void cnnergy::<unnamed>::plane_backward_apply_kernel<float, 4, 0>(const T1 *, unsigned int)": "batch norm",
            "void cnnergy::<unnamed>::plane_reduce_kernel<float, 1, 2, 1>(const T1 *, const T1 *)": "batch norm",
            "void cnnergy::cuda::kernels::(anonymous namespace)::fill_kernel<float>(float *, float, long)": "elementwise",
            "void cudnn::pooling_fw_4d_kernel<float, float, cudnn::maxpooling_func<float>>(int)": "pooling",
            "void cudnn::ops::scalePackedTensor_kernel<float, float>(long, float *, float)": "convolution",
            "sm90_xmma_wgrad_implicit_gemm_tf32f32_tf32f32_f32_nchwkcrs_nchw": "convolution",
            "void cublasLt::splitKreduce_kernel<32, 16, int, float, float>(int)": "gemm",
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096>)": "nccl",
            "triton_per_fused_convolution_backward_native_batch_norm_backward_3": "triton fused",
            "void at::native::batch_norm_collect_statistics_channels_last_kernel<c10::BFloat16>(int)": "batch norm",
            "void at::native::cunn_SoftMaxForward<4, float, float>(float *, const float *, int)": "loss/softmax",
        }
        for name, want in cases.items():
            self.assertEqual(ks.categorize(name), want, name)
        self.assertEqual(ks.short_name("void f<int (*)(int)>(float *, int)"), "f<int (*)(int)>")

    def test_cli_comparison_and_json(self):
        with tempfile.TemporaryDirectory() as tmp:
            out_json = os.path.join(tmp, "k.json")
            text = io.StringIO()
            with contextlib.redirect_stdout(text):
                rc = ks.main([RAW, DETAILS, "--json", out_json])
            self.assertEqual(rc, 0)
            self.assertIn("== A = ncu_raw, B = ncu_details", text.getvalue())
            with open(out_json) as fh:
                data = json.load(fh)
        rows = {r["category"]: r for r in data["comparison"]["rows"]}
        self.assertAlmostEqual(rows["total"]["diff_ms"], 2.279212 - 2.527, places=6)
        self.assertAlmostEqual(rows["optimizer"]["diff_ms"], -0.1, places=9)
        self.assertNotIn("nccl", rows)  # neither file has any

    def test_not_an_export(self):
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as fh:
            fh.write("==PROF== No kernels were profiled.\n")
        try:
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(ks.main([fh.name]), 1)
        finally:
            os.unlink(fh.name)


if __name__ == "__main__":
    unittest.main()
