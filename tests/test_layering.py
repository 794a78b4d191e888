"""Layering: `runtime` <- `graph` <- `defun`; no module imports a layer above its own.

The folders sit at the repository's top level and install as `defun.runtime`,
`defun.graph` and `defun`; module names here are the installed ones."""
import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = ["runtime", "graph", "defun"]        # lowest first (the folders)
RANK = {name: i for i, name in enumerate(LAYERS)}
PACKAGE = {"runtime": "defun.runtime", "graph": "defun.graph", "defun": "defun"}


def layer_of(name):
    """The layer ('runtime', 'graph', 'defun') of a dotted module name, or None."""
    parts = name.split(".")
    if parts[0] != "defun":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in ("runtime", "graph") else "defun"


def modules():
    """(package, dotted module name, path) of every .py file under the three packages."""
    for pkg in LAYERS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in sorted(files):
                if f.endswith(".py"):
                    path = os.path.join(dirpath, f)
                    rel = os.path.relpath(path, os.path.join(ROOT, pkg))[:-3].replace(os.sep, ".")
                    name = PACKAGE[pkg] if rel == "__init__" else f"{PACKAGE[pkg]}.{rel}"
                    if name.endswith(".__init__"):
                        name = name[:-len(".__init__")]
                    yield pkg, name, path


def imported_modules(tree, module):
    """(line, absolute module name) for every import in `tree`, at any depth."""
    is_pkg_init = module in PACKAGE.values() or module.endswith(".ops")
    package = module if is_pkg_init else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg_init else package.split(".")
                base = base[:len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            yield node.lineno, name
        elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            yield node.lineno, node.args[0].value


def upward_imports():
    bad = []
    for pkg, module, path in modules():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=path)
        for line, name in imported_modules(tree, module):
            top = layer_of(name)
            if top in RANK and RANK[top] > RANK[pkg]:
                bad.append(f"{os.path.relpath(path, ROOT)}:{line} imports {name} "
                           f"({pkg} must not depend on {top})")
    return bad


def test_every_package_has_modules():
    found = {pkg for pkg, _, _ in modules()}
    assert found == set(LAYERS)


def test_no_upward_imports():
    bad = upward_imports()
    assert not bad, "upward imports:\n" + "\n".join(bad)


# The checker itself must be able to fail: feed it sources with upward imports.
@pytest.mark.parametrize("source, module", [
    ("import defun.graph.ir\n", "defun.runtime.tape"),
    ("from defun import function\n", "defun.graph.ir"),
    ("def f():\n    from defun.graph import ir\n    return ir\n", "defun.runtime.execute"),
    ("class C:\n    def m(self):\n        import defun\n", "defun.runtime.ops.math_ops"),
    ("import importlib\nimportlib.import_module('defun.graph.executor')\n", "defun.runtime.context"),
    ("from ..graph import ir\n", "defun.runtime.tape"),
])
def test_checker_detects_upward_imports(source, module):
    pkg = layer_of(module)
    names = [name for _, name in imported_modules(ast.parse(source), module)]
    assert any(RANK.get(layer_of(n), -1) > RANK[pkg] for n in names), names


@pytest.mark.parametrize("source, module", [
    ("import numpy\nfrom defun.runtime import tape\n", "defun.graph.ir"),
    ("from . import dtypes\n", "defun.runtime.tape"),
    ("from .ops import math_ops\n", "defun.runtime"),
    ("from defun.graph.ir import Graph\n", "defun.function"),
])
def test_checker_accepts_downward_and_local_imports(source, module):
    pkg = layer_of(module)
    names = [name for _, name in imported_modules(ast.parse(source), module)]
    assert all(RANK.get(layer_of(n), -1) <= RANK[pkg] for n in names), names


def test_no_module_imports_the_top_level_names():
    """`runtime` and `graph` are not top-level packages: every import says `defun.`."""
    bad = []
    for _, module, path in modules():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=path)
        for line, name in imported_modules(tree, module):
            if name.split(".")[0] in ("runtime", "graph"):
                bad.append(f"{os.path.relpath(path, ROOT)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------------------------------
# No import cycles, and function-level imports of project modules only with a reason.

def _project_names():
    return {module for _, module, _ in modules()}


def _resolve(name, known):
    """The project modules an import of `name` runs: itself (or its package) and the
    packages above it whose `__init__` it triggers."""
    parts = name.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1) if ".".join(parts[:k]) in known]


def import_edges(function_level=True):
    """{module: {imported project module: first line}}; `from a import b` counts a.b when it
    is a module. A module's own enclosing packages are not edges (Python has them loaded)."""
    known = _project_names()
    edges = {}
    for _, module, path in modules():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=path)
        nodes = ast.walk(tree) if function_level else tree.body
        out = edges.setdefault(module, {})
        for node in nodes:
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                for target in _resolve(name, known):
                    if target != module and not module.startswith(target + "."):
                        out.setdefault(target, node.lineno)
    return edges


def find_cycles(edges):
    import networkx as nx
    g = nx.DiGraph()
    for a, targets in edges.items():
        for b in targets:
            g.add_edge(a, b)
    return [c for c in nx.simple_cycles(g)]


def test_no_import_cycles_even_through_function_level_imports():
    cycles = find_cycles(import_edges())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c + [c[0]]) for c in cycles[:20])


def test_cycle_checker_can_fail():
    assert find_cycles({"a": {"b": 1}, "b": {"a": 3}}) in ([["a", "b"]], [["b", "a"]])


def unexplained_imports(text, where):
    """The imports inside functions of source `text` with no comment on their line or the
    one above saying why (laziness a reader should know about: an optional extra, a slow
    import only an error path needs, a layer above loaded late)."""
    lines = text.split("\n")
    tree = ast.parse(text)
    top = {id(n) for n in tree.body}
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in top:
            continue
        here, above = lines[node.lineno - 1], lines[node.lineno - 2].strip()
        if "#" not in here and not above.startswith("#"):
            bad.append(f"{where}:{node.lineno}: {here.strip()}")
    return bad


def unexplained_function_level_imports():
    bad = []
    for _, _, path in modules():
        with open(path, encoding="utf-8") as fh:
            bad += unexplained_imports(fh.read(), os.path.relpath(path, ROOT))
    return bad


def test_function_level_imports_say_why():
    bad = unexplained_function_level_imports()
    assert not bad, "function-level imports without a reason:\n" + "\n".join(bad)


def test_the_function_level_import_check_can_fail():
    source = ("import os\n\n\ndef f():\n    import numpy\n    import json    # only here\n"
              "    # the [dask] extra\n    import dask\n    return os, numpy, json, dask\n")
    assert unexplained_imports(source, "a.py") == ["a.py:5: import numpy"]


# ---------------------------------------------------------------------------------------
# Every module says what it owns; long modules say why they are long.

MAX_LINES = 620


def test_every_module_opens_with_a_docstring_saying_what_it_owns():
    missing = []
    for _, module, path in modules():
        with open(path, encoding="utf-8") as fh:
            doc = ast.get_docstring(ast.parse(fh.read()))
        if not doc or len(doc.split("\n")[0]) < 20:
            missing.append(module)
    assert not missing, f"modules without a docstring saying what they own: {missing}"


def test_no_module_is_long_without_a_reason_in_its_docstring():
    long = []
    for _, module, path in modules():
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        doc = ast.get_docstring(ast.parse(text)) or ""
        if text.count("\n") > MAX_LINES and "long because" not in doc:
            long.append(f"{module}: {text.count(chr(10))} lines")
    assert not long, "modules over ~600 lines without a reason ('long because ...'):\n" + "\n".join(long)


# ---------------------------------------------------------------------------------------
# No Python file in the repository (library, tests, examples, benchmarks) is over 800 lines.

MAX_FILE_LINES = 800


def files_over(root, limit):
    """'path: n lines' for every .py file under `root` (hidden folders skipped) over `limit`."""
    long = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as fh:
                    n = sum(1 for _ in fh)
                if n > limit:
                    long.append(f"{os.path.relpath(path, root)}: {n} lines")
    return long


def test_no_python_file_is_over_800_lines_tests_included():
    long = files_over(ROOT, MAX_FILE_LINES)
    assert not long, f"files over {MAX_FILE_LINES} lines (split them by topic):\n" + "\n".join(long)


def test_the_file_length_check_can_fail(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_long.py").write_text("x = 1\n" * 801)
    (tmp_path / "tests" / "test_short.py").write_text("x = 1\n" * 800)
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "long.py").write_text("x = 1\n" * 900)
    assert files_over(str(tmp_path), 800) == [os.path.join("tests", "test_long.py") + ": 801 lines"]


# ---------------------------------------------------------------------------------------
# No package function is over 60 lines (decorators, signature and docstring included).

MAX_FUNCTION_LINES = 60


def long_functions(tree, where):
    """'where:line name (N lines)' for each function of `tree` longer than the limit."""
    return [f"{where}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


def test_no_package_function_is_over_60_lines():
    long = []
    for _, _, path in modules():
        with open(path, encoding="utf-8") as fh:
            long += long_functions(ast.parse(fh.read()), os.path.relpath(path, ROOT))
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them):\n" + "\n".join(long)


def test_the_function_size_check_can_fail():
    body = "".join(f"    x{k} = {k}\n" for k in range(MAX_FUNCTION_LINES - 1))
    assert long_functions(ast.parse("def short():\n" + body), "a.py") == []
    found = long_functions(ast.parse("class C:\n    def long(self):\n" + body.replace("    ", "        ")
                                     + "        return x0\n"), "a.py")
    assert found == [f"a.py:2 long ({MAX_FUNCTION_LINES + 1} lines)"]


# ---------------------------------------------------------------------------------------
# No package line is over 120 characters.

MAX_LINE_CHARS = 120


def long_lines(text, where):
    """'where:line (N characters)' for each line of `text` over the limit."""
    return [f"{where}:{k} ({len(line)} characters)" for k, line in enumerate(text.split("\n"), 1)
            if len(line) > MAX_LINE_CHARS]


def test_no_package_line_is_over_120_characters():
    long = []
    for _, _, path in modules():
        with open(path, encoding="utf-8") as fh:
            long += long_lines(fh.read(), os.path.relpath(path, ROOT).replace(os.sep, "/"))
    assert not long, f"lines over {MAX_LINE_CHARS} characters (wrap them):\n" + "\n".join(long)


def test_the_line_length_check_can_fail():
    assert long_lines("x = 1\n" + "y" * 121 + "\n" + "z" * 120, "a.py") == ["a.py:2 (121 characters)"]


# ---------------------------------------------------------------------------------------
# Every op row is the op stanza: `register(...)` with keywords only, one a line, in the
# order of OpDef's fields (name, kernel, infer, grad, num_inputs, attrs, defaults, ...).

def _is_register(func):
    return (isinstance(func, ast.Name) and func.id == "register") or \
        (isinstance(func, ast.Attribute) and func.attr == "register" and isinstance(func.value, ast.Name)
         and func.value.id == "registry")


def stanza_faults(tree, where, order):
    """'where:line (what)' for each register(...) call of `tree` that is not a stanza."""
    faults = []
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and _is_register(call.func)):
            continue
        keys, lines = [k.arg for k in call.keywords], [k.lineno for k in call.keywords]
        if call.args or None in keys or any(k not in order for k in keys):
            faults.append(f"{where}:{call.lineno} (positional, ** or unknown arguments)")
        elif keys != sorted(keys, key=order.index):
            faults.append(f"{where}:{call.lineno} (not in OpDef's order: {keys})")
        elif len(set(lines)) != len(lines) or min(lines, default=call.lineno + 1) == call.lineno:
            faults.append(f"{where}:{call.lineno} (not one keyword a line)")
    return faults


def opdef_fields():
    import inspect  # only the stanza test reads a signature
    from defun.runtime.registry import OpDef  # the order of its fields (the rest of this file imports nothing of defun)
    return [p for p in inspect.signature(OpDef.__init__).parameters if p != "self"]


def test_every_register_call_is_the_op_stanza():
    order, faults = opdef_fields(), []
    for _, _, path in modules():
        with open(path, encoding="utf-8") as fh:
            faults += stanza_faults(ast.parse(fh.read()), os.path.relpath(path, ROOT).replace(os.sep, "/"), order)
    assert not faults, "register(...) calls not written as the op stanza (run the codemod):\n" + "\n".join(faults)


def test_the_stanza_check_can_fail():
    order = opdef_fields()
    good = 'register(\n    name="a",\n    kernel=k,\n    infer=i,\n    num_inputs=1,\n)'
    assert stanza_faults(ast.parse(good), "a.py", order) == []
    assert stanza_faults(ast.parse('register("a", k, i)'), "a.py", order) == [
        "a.py:1 (positional, ** or unknown arguments)"]
    assert stanza_faults(ast.parse("register(\n    kernel=k,\n    name='a',\n)"), "a.py", order) == [
        "a.py:1 (not in OpDef's order: ['kernel', 'name'])"]
    assert stanza_faults(ast.parse("register(name='a', kernel=k,\n    infer=i)"), "a.py", order) == [
        "a.py:1 (not one keyword a line)"]


# ---------------------------------------------------------------------------------------
# docs/architecture.md's module map is the tree: every module listed, each below what it
# imports.

def map_order(text):
    """{module: position} for the modules the map's left column names, in order."""
    start = text.index("```text\nruntime/") + len("```text\n")
    block = text[start:text.index("```", start)]
    prefix = {"runtime/": "defun.runtime.", "graph/": "defun.graph.", "defun/": "defun."}
    known = _project_names()
    order, pkg = {}, None
    for line in block.split("\n"):
        if line and not line.startswith(" ") and line.split()[0] in prefix:
            pkg = prefix[line.split()[0]]
            continue
        folder = ""
        for word in re.findall(r"[A-Za-z_][\w/]*", line[:45]):
            if word.endswith("/"):
                folder = word[:-1] + "."
                continue
            if "/" in word:
                folder, word = word.split("/", 1)[0] + ".", word.split("/", 1)[1]
            name = pkg + folder + word if pkg + folder + word in known else pkg + word
            if name in known:
                order.setdefault(name, len(order))
    return order


def test_the_architecture_map_lists_every_module_below_what_it_imports():
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as fh:
        order = map_order(fh.read())
    packages = {PACKAGE[p] for p in LAYERS}
    missing = [m for m in sorted(_project_names()) if m not in order and m not in packages
               and not m.endswith("__main__") and not any(o.startswith(m + ".") for o in order)]
    assert not missing, f"modules the map does not list: {missing}"
    above = [f"{a} imports {b}, listed below it" for a, targets in import_edges(False).items()
             if a in order for b in targets if b in order and order[b] > order[a]]
    assert not above, "\n".join(above)


def test_the_map_reader_sees_folders_arrows_and_continuations():
    text = ("```text\nruntime/        (a caption)\n  errors, dtypes    leaves\n"
            "  ops/_onnx -> ops/shape_rules,    forms\n    ops/_args       more\n"
            "graph/\n  serialize/ schema -> validate    the format\n"
            "defun/\n  spec -> cache_key     keys\n```\n")
    assert list(map_order(text)) == [
        "defun.runtime.errors", "defun.runtime.dtypes", "defun.runtime.ops._onnx",
        "defun.runtime.ops.shape_rules", "defun.runtime.ops._args", "defun.graph.serialize.schema",
        "defun.graph.serialize.validate", "defun.spec", "defun.cache_key"]
