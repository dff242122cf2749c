"""`pip install ./clients/python` works with nothing but the standard library."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# The interpreter's environment without this test run's Python settings.
CLEAN = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
CLEAN["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
CLEAN["PIP_BREAK_SYSTEM_PACKAGES"] = "1"  # a --target install touches no system package
CLEAN["PIP_ROOT_USER_ACTION"] = "ignore"


def builder() -> "str | None":
    """A Python with pip, setuptools and wheel: this one, or Debian's (there is
    no package index here to fetch them from)."""
    for python in (sys.executable, "/usr/bin/python3"):
        has = "import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in ('pip', 'setuptools', 'wheel')))"
        if os.path.exists(python) and subprocess.run([python, "-c", has], env=CLEAN, capture_output=True).returncode == 0:
            return python
    return None


class InstallTest(unittest.TestCase):
    def test_pip_installs_it_and_it_imports(self) -> None:
        python = builder()
        if python is None:
            if os.environ.get("AIRLOCK_TEST_REQUIRE_PYTHON") == "1":
                self.fail("no Python with pip, setuptools and wheel (Debian: python3-pip python3-setuptools python3-wheel)")
            self.skipTest("no Python with pip, setuptools and wheel")
        with tempfile.TemporaryDirectory() as target, tempfile.TemporaryDirectory() as build:
            # A copy: setuptools builds in the source tree.
            source = os.path.join(build, "airlock-client")
            shutil.copytree(HERE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests", "*.go"))
            subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
                            "--no-index", "--target", target, source], check=True, cwd=build, env=CLEAN)
            out = subprocess.run([python, "-c", "import airlock; print(airlock.__file__); print(sorted(airlock.__all__))"],
                                 check=True, capture_output=True, text=True, env=dict(CLEAN, PYTHONPATH=target), cwd=build)
            self.assertTrue(out.stdout.startswith(target), out.stdout)
            for name in ("'guarded'", "'plan'", "'Worker'"):
                self.assertIn(name, out.stdout)
            self.assertTrue(os.path.exists(os.path.join(target, "airlock", "py.typed")))
