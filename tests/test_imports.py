"""What `import defun` loads (issue 31): no optional or heavy package until it is used.

Checked in a fresh interpreter (sys.modules after the import), never timed: how long the
import takes is benchmarks/imports.py's to measure.
"""
import json
import subprocess
import sys

import pytest

# optional extras and slow-to-import packages, each loaded only where it is used
HEAVY = ("networkx", "scipy", "numba", "llvmlite", "onnx", "onnxruntime", "dask", "distributed", "graphviz",
         "torch", "jax", "threadpoolctl", "sklearn", "matplotlib")
# defun's own modules that only their first use loads
LAZY = ("defun.numpy_export", "defun.graph.numpy_source", "defun.onnx_export", "defun.graph.onnx_export",
        "defun.dask")


def _loaded_after(code):
    """The top-level packages and defun modules in sys.modules after `code`, in a fresh
    interpreter."""
    probe = (f"import sys\n{code}\nimport json\n"
             "print(json.dumps(sorted(m for m in sys.modules if '.' not in m or m.startswith('defun.'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_import_defun_loads_no_optional_or_heavy_package():
    loaded = _loaded_after("import defun")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    assert not loaded & set(LAZY), sorted(loaded & set(LAZY))
    assert "numpy" in loaded and "defun" in loaded


def test_the_version_loads_no_optional_or_heavy_package():
    loaded = _loaded_after("sys.argv = ['defun', '--version']\nfrom defun.cli import main\n"
                           "try:\n    main()\nexcept SystemExit:\n    pass")
    assert not loaded & (set(HEAVY) | set(LAZY)), sorted(loaded & (set(HEAVY) | set(LAZY)))


@pytest.mark.parametrize("name, module", [("export_numpy_source", "defun.numpy_export"),
                                          ("export_onnx", "defun.onnx_export")])
def test_a_lazy_name_loads_on_first_use_and_is_public(name, module):
    loaded = _loaded_after(f"import defun as df\nf = df.{name}\nassert f.__module__ == {module!r}, f\n"
                           f"assert {name!r} in dir(df) and {name!r} in df.__all__\n"
                           f"from defun import {name} as again\nassert again is f")
    assert module in loaded
    assert "onnx" not in loaded         # the ONNX export imports onnx only when it runs


def test_the_lazy_names_work():
    import numpy as np
    import defun as df
    cf = df.defun(lambda x: x * 2.0).get_concrete_function(df.TensorSpec([2], df.float32))
    namespace = {}
    exec(compile(df.export_numpy_source(cf), "<module>", "exec"), namespace)
    np.testing.assert_array_equal(namespace["forward"](np.ones(2, np.float32))[0], [2.0, 2.0])
    assert callable(df.profile) and isinstance(df.profile(cf, np.ones(2, np.float32), repeat=1), df.Profile)
