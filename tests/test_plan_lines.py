"""A compiled plan reports the user's lines: every instruction of a node's generated line is
located at the node's site, whatever the distance and direction between consecutive sites
(one line, tens, thousands, backwards), so a warning or error raised while the plan runs
names the user's file and line. The location table is rewritten entry by entry with numpy
(graph/executor.py's _user_lines); this checks it against the plan's own node table."""
import linecache
import warnings

import numpy as np
import pytest

import defun as df
from defun.graph.functions import plan_of

# The user's lines, far apart and out of order: helpers placed by padding the source.
_GAPS = [1, 2, 31, 32, 33, 63, 64, 65, 2047, 2048, 4100, 300000]


def _user_module(tmp_path, gaps):
    """A module whose `f` calls one op per helper, the helpers' op lines `gaps` apart, in
    reverse order of their position in the file (so consecutive sites jump back as well)."""
    lines, names = [], []
    for k, gap in enumerate(gaps):
        lines += [""] * gap
        lines += [f"def h{k}(x):", f"    return df.sin(x) * {k + 2}.0"]
        names.append(f"h{k}")
    body = "".join(f"    x = {n}(x)\n" for n in reversed(names))
    source = "import defun as df\n" + "\n".join(lines) + "\n\ndef f(x):\n" + body + "    return x\n"
    path = tmp_path / "user_far_lines.py"
    path.write_text(source)
    namespace = {"__name__": "user_far_lines"}
    exec(compile(source, str(path), "exec"), namespace)
    return namespace["f"], str(path)


def _plan(fn, x):
    concrete = df.defun(fn, autograph=False).get_concrete_function(x)
    return plan_of(concrete.graph, "numpy")


def test_every_node_line_is_its_site(tmp_path):
    f, path = _user_module(tmp_path, _GAPS)
    x = df.constant(np.linspace(0.1, 1.0, 5))
    plan = _plan(f, x)
    code, generated = plan.run.__code__, plan.run.__globals__["_generated"]
    nodes = plan.run.__globals__["_lines"]            # generated line -> node
    assert code.co_filename == path
    by_offset = {}
    for start, end, line in generated.co_lines():
        for offset in range(start, end, 2):
            by_offset[offset] = line
    checked = 0
    for start, end, line in code.co_lines():
        for offset in range(start, end, 2):
            node = nodes.get(by_offset[offset])
            if node is not None and node.site and node.site[0] == path:
                assert line == node.site[1], (offset, node)
                assert "df.sin" in linecache.getline(path, line) or "* " in linecache.getline(path, line)
                checked += 1
    assert checked > 4 * len(_GAPS)


def test_warning_from_a_far_line(tmp_path):
    """A numpy warning raised by a node whose site is 300,000 lines below the one before it."""
    source = "import defun as df\n" + "\n" * 300000 + "def f(x):\n    return df.log(x - x)\n"
    path = tmp_path / "far_warning.py"
    path.write_text(source)
    namespace = {}
    exec(compile(source, str(path), "exec"), namespace)
    g = df.defun(namespace["f"], autograph=False)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = g(df.constant([1.0, 2.0]))
    assert np.all(np.isneginf(out.numpy()))
    assert record and all(w.filename == str(path) for w in record), [(w.filename, w.lineno) for w in record]
    assert {w.lineno for w in record} == {300003}


@pytest.mark.parametrize("gaps", [[1] * 40, [5000, 1, 70000, 3]])
def test_numbers_unchanged(tmp_path, gaps):
    f, _ = _user_module(tmp_path, gaps)
    x = df.constant(np.linspace(0.1, 1.0, 5))
    expected = x.numpy()
    for k in range(len(gaps)):
        expected = np.sin(expected) * (len(gaps) - k + 1)
    np.testing.assert_allclose(df.defun(f)(x).numpy(), expected, rtol=1e-12)
