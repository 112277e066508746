#!/usr/bin/env python3
"""The installable package: `python3 -m build --wheel --no-isolation` in the source tree (reusing
the configured build directory CNNERGY_CMAKE_BUILD_DIR, so only cnnergy_api is brought up to date),
the wheel installed into a fresh virtual environment with no network and no PYTHONPATH, and the
package's own tests (test_python_module.py) run from the installed wheel with both backends; the
console entry point cnnergy-monitor runs a command on the fake GPU; `pip install
--no-build-isolation .` from the source tree into a venv that sees Debian's setuptools and wheel.
CNNERGY_WHEEL_FRESH=1 also builds one wheel with no build directory given (a fresh CPU-only CMake
configure and build of cnnergy_api: minutes, so not in CI by default)."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

SOURCE = os.environ["CNNERGY_SOURCE_DIR"]
HERE = os.path.dirname(os.path.abspath(__file__))


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "CNNERGY_LIBRARY", "CNNERGY_PYTHON_BACKEND")}
    env.update(extra)
    return env


def header_api_version():
    """CNNERGY_API_VERSION of the C header the wheel was built from."""
    with open(os.path.join(SOURCE, "include", "cnnergy", "cnnergy.h")) as f:
        for line in f:
            if line.startswith("#define CNNERGY_API_VERSION "):
                return int(line.split()[2])
    raise AssertionError("no CNNERGY_API_VERSION in include/cnnergy/cnnergy.h")


def run(cmd, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 900)
    r = subprocess.run(cmd, **kw)
    if r.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s\n%s" % (" ".join(cmd), r.returncode,
                                                          r.stdout[-4000:], r.stderr[-4000:]))
    return r


class WheelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        try:
            import build  # noqa: F401  (Debian: python3-build)
        except ImportError:
            raise AssertionError("the wheel test needs python3-build (apt-get install "
                                 "python3-build python3-venv python3-wheel python3-setuptools)")
        cls.tmp = tempfile.mkdtemp(prefix="cnnergy-wheel-")
        dist = os.path.join(cls.tmp, "dist")
        env = clean_env(CNNERGY_BUILD_JOBS="2")
        run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, SOURCE],
            env=env, cwd=cls.tmp)
        wheels = glob.glob(os.path.join(dist, "cnnergy-*.whl"))
        assert len(wheels) == 1, wheels
        cls.wheel = wheels[0]
        cls.venv = os.path.join(cls.tmp, "venv")
        run([sys.executable, "-m", "venv", cls.venv])
        cls.python = os.path.join(cls.venv, "bin", "python")
        run([cls.python, "-m", "pip", "install", "--no-index", "--no-deps",
             "--disable-pip-version-check", cls.wheel], env=clean_env(PIP_NO_INDEX="1"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_wheel_holds_the_package_and_the_library(self):
        names = zipfile.ZipFile(self.wheel).namelist()
        for n in ("cnnergy/__init__.py", "cnnergy/optimizer.py", "cnnergy/libcnnergy.so.1",
                  "cnnergy/integrations/lightning.py", "cnnergy/integrations/transformers.py"):
            self.assertIn(n, names)
        self.assertFalse([n for n in names if "libnvidia-ml" in n], "NVML must not be packed")
        self.assertTrue(any("entry_points.txt" in n for n in names))

    def imported(self, backend):
        code = ("import json, cnnergy; print(json.dumps({'file': cnnergy.__file__, 'backend': "
                "cnnergy.backend_name, 'api': cnnergy.api_version(), "
                "'heavy': [m for m in ('torch', 'lightning', 'transformers') "
                "if m in __import__('sys').modules]}))")
        env = clean_env(**({"CNNERGY_PYTHON_BACKEND": "ctypes"} if backend == "ctypes" else {}))
        r = run([self.python, "-c", code], env=env, cwd=self.tmp)
        return json.loads(r.stdout)

    def test_imports_from_the_venv_without_pythonpath(self):
        for backend in ("pybind11", "ctypes"):
            info = self.imported(backend)
            self.assertTrue(info["file"].startswith(self.venv), info)
            self.assertEqual(info["api"] // 100, header_api_version() // 100)  # major.minor
            self.assertEqual(info["heavy"], [])  # frameworks are imported only by the callbacks
        self.assertEqual(self.imported("ctypes")["backend"], "ctypes")
        self.assertEqual(self.imported("pybind11")["backend"], "pybind11")

    def test_integrations_say_what_they_need(self):
        r = subprocess.run([self.python, "-c", "import cnnergy.integrations.lightning"],
                           capture_output=True, text=True, env=clean_env(), cwd=self.tmp)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("needs PyTorch Lightning: pip install lightning", r.stderr)
        r = subprocess.run([self.python, "-c", "import cnnergy.integrations.transformers"],
                           capture_output=True, text=True, env=clean_env(), cwd=self.tmp)
        self.assertIn("pip install transformers", r.stderr)

    def test_console_entry_point(self):
        exe = os.path.join(self.venv, "bin", "cnnergy-monitor")
        r = run([exe, "--json", "--", "sleep", "0.3"], env=clean_env(), cwd=self.tmp)
        report = json.loads(r.stderr[r.stderr.index("{"):])
        self.assertEqual(report["exit_code"], 0)
        self.assertGreater(report["runs"][0]["gpu_energy_j"], 0)

    def test_package_tests_from_the_installed_wheel(self):
        test = os.path.join(HERE, "test_python_module.py")
        for backend in ("pybind11", "ctypes"):
            extra = {"CNNERGY_PYTHON_BACKEND": "ctypes"} if backend == "ctypes" else {}
            r = subprocess.run([self.python, test], capture_output=True, text=True,
                               env=clean_env(**extra), cwd=self.tmp, timeout=600)
            self.assertEqual(r.returncode, 0, "%s backend:\n%s" % (backend, r.stderr[-6000:]))
            self.assertIn("OK", r.stderr)
            self.assertNotIn("skipping", r.stdout)

    def test_pip_install_from_the_source_tree(self):
        # Debian's pip, offline: a venv that sees Debian's setuptools and wheel, no build isolation
        venv = os.path.join(self.tmp, "venv-pip")
        run([sys.executable, "-m", "venv", "--system-site-packages", venv])
        python = os.path.join(venv, "bin", "python")
        run([python, "-m", "pip", "install", "--no-build-isolation", "--no-index",
             "--disable-pip-version-check", SOURCE], env=clean_env(PIP_NO_INDEX="1"), cwd=self.tmp)
        r = run([python, "-c", "import cnnergy; print(cnnergy.__file__)"], env=clean_env(),
                cwd=self.tmp)
        self.assertTrue(r.stdout.strip().startswith(venv), r.stdout)
        self.assertTrue(os.path.exists(os.path.join(venv, "bin", "cnnergy-monitor")))

    @unittest.skipUnless(os.environ.get("CNNERGY_WHEEL_FRESH") == "1",
                         "set CNNERGY_WHEEL_FRESH=1 for a wheel without a prebuilt build directory")
    def test_fresh_build_without_a_build_directory(self):
        dist = os.path.join(self.tmp, "fresh")
        env = clean_env(CNNERGY_BUILD_JOBS="2")
        env.pop("CNNERGY_CMAKE_BUILD_DIR", None)
        run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, SOURCE],
            env=env, cwd=self.tmp, timeout=3600)
        self.assertEqual(len(glob.glob(os.path.join(dist, "cnnergy-*.whl"))), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
