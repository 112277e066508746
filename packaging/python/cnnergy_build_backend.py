"""The PEP 517 build backend of the cnnergy wheel: setuptools (Debian's python3-setuptools, with
setup.py building the CMake target cnnergy_api), or scikit-build-core when
CNNERGY_WHEEL_BACKEND=scikit-build-core and it is installed (the [tool.scikit-build] table of
pyproject.toml and the `python_wheel` install component of src/api/python/CMakeLists.txt)."""
import os

_choice = os.environ.get("CNNERGY_WHEEL_BACKEND", "setuptools")
if _choice == "scikit-build-core":
    try:
        from scikit_build_core.build import *  # noqa: F401,F403
    except ImportError as e:  # say so instead of silently building the other way
        raise ImportError("CNNERGY_WHEEL_BACKEND=scikit-build-core, but scikit_build_core is not "
                          "importable (%s); unset it to build with setuptools" % e) from e
elif _choice == "setuptools":
    from setuptools.build_meta import *  # noqa: F401,F403
else:
    raise ValueError("CNNERGY_WHEEL_BACKEND must be setuptools or scikit-build-core, not %r"
                     % _choice)
