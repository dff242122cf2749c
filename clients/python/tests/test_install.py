"""`pip install ./clients/python` works with nothing but the standard library."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


@unittest.skipIf(any(importlib.util.find_spec(m) is None for m in ("pip", "setuptools", "wheel")),
                 "pip, setuptools or wheel is not installed, and there is no package index to fetch them from")
class InstallTest(unittest.TestCase):
    def test_pip_installs_it_and_it_imports(self) -> None:
        with tempfile.TemporaryDirectory() as target, tempfile.TemporaryDirectory() as build:
            # No index here: the build uses the setuptools already installed.
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
                            "--no-index", "--target", target, HERE],
                           check=True, cwd=build, env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
            out = subprocess.run([sys.executable, "-c", "import airlock, sys; print(airlock.__file__); print(sorted(airlock.__all__))"],
                                 check=True, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=target), cwd=build)
            self.assertTrue(out.stdout.startswith(target), out.stdout)
            self.assertIn("'guarded'", out.stdout)
            self.assertTrue(os.path.exists(os.path.join(target, "airlock", "py.typed")))
