"""Nothing changes the process environment: the library and the examples never write
os.environ (checked in their source), and conftest's guard fails a test or a module's
fixtures that leave it changed (checked by running pytest on such tests)."""
import ast
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
_WRITES = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


def _environ_writes(path):
    """(line, what) for each write to os.environ (or os.putenv/unsetenv) in a Python file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))

    def is_environ(node):
        return isinstance(node, ast.Attribute) and node.attr == "environ" or \
            isinstance(node, ast.Name) and node.id == "environ"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            found += [(node.lineno, "os.environ[...] =/del") for t in targets
                      if isinstance(t, ast.Subscript) and is_environ(t.value)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _WRITES and is_environ(node.func.value):
                found.append((node.lineno, f"os.environ.{node.func.attr}"))
            elif node.func.attr in ("putenv", "unsetenv"):
                found.append((node.lineno, f"os.{node.func.attr}"))
    return found


def test_the_library_and_the_examples_never_write_os_environ():
    offenders = []
    for folder in ("defun", "runtime", "graph", "examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            offenders += [f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in _environ_writes(path)]
    assert offenders == [], "the environment belongs to the user:\n" + "\n".join(offenders)


def test_the_scan_finds_each_kind_of_write(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nos.environ['A'] = '1'\nos.environ.setdefault('B', '1')\n"
                      "del os.environ['C']\nos.putenv('D', '1')\nx = os.environ.get('E')\n")
    assert sorted(line for line, _ in _environ_writes(sample)) == [2, 3, 4, 5]


def test_conftest_fails_a_test_or_module_that_leaves_os_environ_changed(tmp_path):
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_leaky.py").write_text(
        "import os\nimport pytest\n\n"
        "def test_sets_a_thread_variable():\n    os.environ['OPENBLAS_NUM_THREADS'] = '1'\n\n"
        "def test_after_it_sees_the_environment_put_back():\n"
        "    assert 'OPENBLAS_NUM_THREADS' not in os.environ\n\n"
        "def test_restoring_with_monkeypatch_is_fine(monkeypatch):\n"
        "    monkeypatch.setenv('SOME_VARIABLE', 'x')\n")
    (tmp_path / "test_leaky_module.py").write_text(
        "import os\nimport pytest\n\n"
        "@pytest.fixture(scope='module')\ndef cluster():\n    os.environ['OMP_NUM_THREADS'] = '1'\n    yield\n\n"
        "def test_uses_it(cluster):\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    out = proc.stdout
    assert proc.returncode == 1, out
    assert "test_sets_a_thread_variable left os.environ changed: OPENBLAS_NUM_THREADS='1' (was None)" in out
    assert "PASSED test_leaky.py::test_after_it_sees_the_environment_put_back" in out
    assert "PASSED test_leaky.py::test_restoring_with_monkeypatch_is_fine" in out
    assert "test_leaky_module (its module-scoped fixtures) left os.environ changed: OMP_NUM_THREADS" in out
