"""setuptools glue for the cnnergy wheel (pyproject.toml holds the metadata): builds only the CMake
targets the Python package needs (cnnergy_api = libcnnergy.so.1, and the pybind11 extension where
pybind11-dev is found) and copies them into the package, so the wheel imports without PYTHONPATH.

CNNERGY_CMAKE_BUILD_DIR=<dir>: reuse an existing configured build directory (only the two targets
are brought up to date: nothing when the project is already built). Otherwise a CPU-only build is
configured in build/wheel (ccache is used when CMAKE_CXX_COMPILER_LAUNCHER says so).
CNNERGY_BUILD_JOBS: parallel build jobs (default 2)."""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = ["cnnergy_api", "cnnergy_python_ext"]


def _run(cmd):
    print("cnnergy wheel: " + " ".join(cmd), flush=True)
    subprocess.check_call(cmd)


def cmake_build_dir():
    """The build directory holding lib/libcnnergy.so.1, built up to date for TARGETS."""
    jobs = os.environ.get("CNNERGY_BUILD_JOBS", "2")
    given = os.environ.get("CNNERGY_CMAKE_BUILD_DIR")
    if given:
        build_dir = os.path.abspath(given)
        if not os.path.isfile(os.path.join(build_dir, "CMakeCache.txt")):
            sys.exit("cnnergy wheel: CNNERGY_CMAKE_BUILD_DIR=%s is not a configured CMake build "
                     "directory (no CMakeCache.txt); unset it to configure a fresh one" % given)
    else:
        build_dir = os.path.join(HERE, "build", "wheel")
        if not os.path.isfile(os.path.join(build_dir, "CMakeCache.txt")):
            _run(["cmake", "-S", HERE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                  "-DCNNERGY_CUDA=OFF", "-DPython3_EXECUTABLE=" + sys.executable])
    _run(["cmake", "--build", build_dir, "-j", jobs, "--target"] + TARGETS)
    return build_dir


class BuildPyWithLibrary(build_py):
    """build_py, then libcnnergy.so.1 and the pybind11 extension (where built) into the package."""

    def run(self):
        super().run()
        if self.dry_run:
            return
        build_dir = cmake_build_dir()
        out = os.path.join(self.build_lib, "cnnergy")
        lib = os.path.join(build_dir, "lib", "libcnnergy.so.1")
        if not os.path.exists(lib):
            sys.exit("cnnergy wheel: %s was not built" % lib)
        shutil.copyfile(os.path.realpath(lib), os.path.join(out, "libcnnergy.so.1"))
        # The extension is built for the Python that configured the build directory; it joins the
        # wheel only when that is this Python (else the package falls back to ctypes).
        from importlib.machinery import EXTENSION_SUFFIXES
        for ext in glob.glob(os.path.join(build_dir, "python", "cnnergy", "_cnnergy_ext*.so")):
            if any(ext.endswith(s) for s in EXTENSION_SUFFIXES):
                shutil.copyfile(ext, os.path.join(out, os.path.basename(ext)))
            else:
                print("cnnergy wheel: leaving out %s (built for another Python); the wheel uses "
                      "the ctypes backend" % os.path.basename(ext), flush=True)


class BinaryDistribution(Distribution):
    """A platform wheel: it carries a native library."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
