"""The README and the guide teach the public API only: their code imports `defun` (as `df`)
and names it exports, never a module inside it (`defun.graph...`, `defun.cli`, ...).

docs/architecture.md is the map of the internals and imports them on purpose; it is not
checked here.
"""
import ast
import os

import pytest

import defun as df
from test_docs import extract_blocks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAUGHT = ["README.md", os.path.join("docs", "guide.md")]


def internal_imports(source):
    """The imports of python `source` that reach past the public API: `import defun.X`,
    `from defun.X import ...`, or `from defun import name` of a name `df` does not export."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            bad += [f"import {a.name}" for a in node.names if a.name.startswith("defun.")]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("defun."):
                bad.append(f"from {node.module} import ...")
            elif node.module == "defun":
                bad += [f"from defun import {a.name}" for a in node.names
                        if a.name != "*" and a.name not in df.__all__]
    return bad


@pytest.mark.parametrize("name", TAUGHT)
def test_the_taught_code_imports_only_the_public_api(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        blocks = extract_blocks(f.read(), kinds=("python",))
    assert blocks, f"{name} has no python blocks"
    bad = [f"{name}:{line}: {imp}" for line, source, _, _ in blocks for imp in internal_imports(source)]
    assert not bad, "code blocks importing internal modules:\n" + "\n".join(bad)


def test_the_import_check_can_fail():
    assert internal_imports("import defun as df\nimport numpy as np\nfrom defun import defun") == []
    assert internal_imports("from defun.graph.printer import to_dot") == ["from defun.graph.printer import ..."]
    assert internal_imports("import defun.cli") == ["import defun.cli"]
    assert internal_imports("def f():\n    from defun import array_ops\n") == ["from defun import array_ops"]
