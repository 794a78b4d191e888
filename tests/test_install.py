"""The installed names: `defun`, `defun.runtime`, `defun.graph`, nothing else.

A user's own `graph.py` or `runtime.py` beside their script must not shadow the library,
`dir(df)` is the API (no module objects but the documented namespaces), and the install
maps every package folder of the repository.
"""
import pathlib
import subprocess
import sys
import tomllib
import types

import defun as df

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAMESPACES = {"errors", "linalg", "math", "nn", "random", "debugging", "optimizers", "dask", "signal", "test",
              "config", "autograph"}

USER_SCRIPT = """
import sys
import defun as df
import defun.graph.executor, defun.runtime.tape
x = df.constant([1.0, 2.0])
f = df.defun(lambda x: df.reduce_sum(x * x))
print(float(f(x)), sys.modules["graph"].MINE, sys.modules["runtime"].MINE)
"""


def test_import_defun_works_beside_a_users_graph_and_runtime_modules(tmp_path):
    (tmp_path / "graph.py").write_text("MINE = 'graph'\n")
    (tmp_path / "runtime.py").write_text("MINE = 'runtime'\n")
    (tmp_path / "main.py").write_text("import graph, runtime\n" + USER_SCRIPT)
    proc = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["5.0", "graph", "runtime"]


def test_the_library_imports_no_top_level_graph_or_runtime(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "import sys, defun; defun.dask; "
                           "print(sorted({m.split('.')[0] for m in sys.modules} & {'graph', 'runtime'}))"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_dir_lists_the_api_and_only_the_documented_namespaces():
    names = dir(df)
    assert names == sorted(names) and "defun" in names and "GradientTape" in names
    modules = {n for n in names if isinstance(getattr(df, n), types.ModuleType)}
    assert modules <= NAMESPACES, sorted(modules - NAMESPACES)
    assert {"errors", "linalg", "random", "debugging", "optimizers", "dask"} <= modules
    assert not [n for n in names if n.startswith("_")]
    for hidden in ("runtime", "graph", "array_ops", "math_ops", "function", "export"):
        assert hidden not in names


def test_star_import_takes_the_api():
    scope = {}
    exec("from defun import *", scope)
    assert "defun" in scope and "reduce_sum" in scope
    assert "runtime" not in scope and "graph" not in scope and "math_ops" not in scope


def test_dask_is_loaded_on_first_use(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "import sys, defun as df; a = 'defun.dask' in sys.modules; "
                           "df.dask.map_blocks; print(a, 'defun.dask' in sys.modules)"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]


def test_the_install_maps_every_package_folder():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = config["package-dir"]
    assert folders == {"defun": "defun", "defun.runtime": "runtime", "defun.graph": "graph"}
    found = set()
    for name, folder in folders.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join((name,) + rel.parts) if rel.parts else name)
    assert sorted(config["packages"]) == sorted(found)


def test_an_unknown_attribute_is_an_attribute_error():
    try:
        df.no_such_name
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("df.no_such_name did not raise")


def test_modules_run_from_a_checkout_import_their_own_folders():
    """The repository run without an install (a second work tree) imports its own code."""
    import defun.graph
    import defun.runtime
    here = pathlib.Path(df.__file__).resolve().parent
    expected = {here / "graph", here / "runtime"} if (here / "runtime").is_dir() else \
        {here.parent / "graph", here.parent / "runtime"}
    assert {pathlib.Path(defun.graph.__file__).resolve().parent,
            pathlib.Path(defun.runtime.__file__).resolve().parent} == expected
