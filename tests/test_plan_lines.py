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


def _line_of(marker):
    """This file's line holding `marker` (in a comment)."""
    with open(__file__) as f:
        return next(n for n, text in enumerate(f, 1) if marker in text and "_line_of" not in text)


def _grad_of_sqrt(x):
    return df.reduce_sum(df.sqrt(x) * 3.0)   # MARK-forward-sqrt


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("inside", [False, True], ids=["tape-around", "gradient-inside"])
def test_a_backward_warning_names_its_forward_line(dtype, inside):
    """sqrt's gradient divides by sqrt(0): the backward plan's warning points at the line of
    the sqrt it differentiates, not at the line that called the defun or asked for the gradient
    (every backward node used to sit there)."""
    x = df.constant(np.array([0.0, 4.0], dtype))
    if inside:
        f = df.defun(df.gradients_function(_grad_of_sqrt))
    else:
        fwd = df.defun(_grad_of_sqrt)

        def f(x):
            with df.GradientTape() as tape:
                tape.watch(x)
                y = fwd(x)
            return [tape.gradient(y, x)]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        (g,) = f(x)
    assert g.numpy()[1] == pytest.approx(0.75, rel=1e-3)
    assert np.isinf(g.numpy()[0])
    divides = [r for r in rec if "divide" in str(r.message)]
    assert divides and all((r.filename, r.lineno) == (__file__, _line_of("MARK-forward-sqrt")) for r in divides), \
        [(r.filename, r.lineno, str(r.message)) for r in rec]


def test_backward_nodes_sit_at_forward_lines_and_a_custom_gradient_at_its_own():
    """Every node of a defun's backward a built-in rule made sits at its forward op's line; a
    node the user's custom gradient made sits at that function's line; only the seed, the
    watched input and the sum of its gradients sit at the line asking for the gradient."""
    @df.custom_gradient
    def clipped(x):
        def grad(dy):
            return dy * 0.5   # MARK-custom-grad
        return df.identity(x), grad   # MARK-custom-forward

    def loss(x):
        y = df.tanh(x) * df.exp(x)   # MARK-forward-two
        return df.reduce_sum(clipped(y)) + df.reduce_sum(x * x)   # MARK-forward-sum

    x = df.constant(np.linspace(-1, 1, 5))
    graph = df.defun(df.gradients_function(loss)).get_concrete_function(x).graph   # MARK-asked
    at = {}
    for n in graph.nodes:
        if n.site is not None and n.site[0] == __file__:
            at.setdefault(n.site[1], set()).add(n.op.name)
    two, total, asked = _line_of("MARK-forward-two"), _line_of("MARK-forward-sum"), _line_of("MARK-asked")
    custom, custom_forward = _line_of("MARK-custom-grad"), _line_of("MARK-custom-forward")
    assert set(at) == {two, total, custom, custom_forward, asked}, at
    assert at[asked] <= {"identity", "ones_like", "add_n"}, at[asked]
    assert {"square", "subtract", "const"} <= at[two] and "multiply" in at[custom], at
    (g,) = df.gradients_function(loss)(x)
    v = x.numpy()
    np.testing.assert_allclose(g.numpy(), 0.5 * ((1 - np.tanh(v) ** 2) * np.exp(v) + np.tanh(v) * np.exp(v)) + 2 * v)


def test_a_rematerialized_backward_names_its_forward_line_under_check_numerics():
    """rematerialize=True traces its backward apart (forward ops again, then their gradients):
    check numerics names the line of sqrt for the Inf of its gradient (it named the line
    calling the defun, as that op's "forward op") and that it is sqrt's gradient."""
    g = df.defun(_grad_of_sqrt, rematerialize=True)
    x = df.constant(np.array([0.0, 1.0]))
    df.debugging.enable_check_numerics()
    try:
        with df.GradientTape() as tape:
            tape.watch(x)
            y = g(x)
        with pytest.raises(df.errors.InvalidArgumentError, match=r"in the backward") as info:
            tape.gradient(y, x)
    finally:
        df.debugging.disable_check_numerics()
    assert f"{__file__}:{_line_of('MARK-forward-sqrt')}" in str(info.value), str(info.value)
    assert "the gradient of sqrt" in str(info.value), str(info.value)     # its nodes are inlined, under new ids


def _per_example(x):
    y = x - 1.0
    return df.sqrt(y)   # MARK-vmapped-sqrt


def test_vmapped_ops_sit_at_the_lines_of_the_function_vmap_was_given():
    """df.vmap batches the ops of the function it traced: each batched op (in a defun's graph,
    or run eagerly under check numerics) is at its line in that function, not the line calling
    df.vmap (where every one of them used to be)."""
    sqrt_line = _line_of("MARK-vmapped-sqrt")

    @df.defun
    def outer(xs):
        return df.reduce_sum(df.vmap(_per_example)(xs))   # MARK-vmap-call

    xs = df.constant(np.array([2.0, 0.5]))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        total = outer(xs)
    assert np.isnan(total.numpy())
    assert [(r.filename, r.lineno) for r in rec if "sqrt" in str(r.message)] == [(__file__, sqrt_line)]
    nodes = outer.get_concrete_function(xs).graph.nodes
    assert {n.op.name: n.site[1] for n in nodes if n.site is not None and n.op.name in ("sqrt", "subtract")} == \
        {"sqrt": sqrt_line, "subtract": sqrt_line - 1}
    df.debugging.enable_check_numerics()
    try:
        with pytest.raises(df.errors.InvalidArgumentError, match=f"{__file__}:{sqrt_line}"):
            df.vmap(_per_example)(xs)
    finally:
        df.debugging.disable_check_numerics()


def test_per_example_gradients_under_vmap_keep_their_lines():
    """A per-example gradient under vmap: the batched ops of a custom gradient's function stay
    at its lines, those of a cond's branches at theirs (not at the line calling df.vmap)."""
    @df.custom_gradient
    def soft(x):
        def grad(dy):
            return dy * df.exp(-x)   # MARK-batched-custom-grad
        return df.tanh(x), grad

    def f(x):
        y = df.cond(x > 0.0, lambda: df.exp(x),   # MARK-branch-true
                    lambda: df.square(x))   # MARK-branch-false
        return soft(y)   # MARK-soft-call

    x = df.constant(np.array([1.0, -2.0]))
    graph = df.defun(df.vmap(df.gradients_function(f))).get_concrete_function(x).graph
    lines = {}
    for n in graph.nodes:
        if n.site is not None and n.op.name in ("exp", "square", "negative"):
            lines.setdefault(n.op.name, set()).add(n.site[1])
    assert lines["negative"] == {_line_of("MARK-batched-custom-grad")}, lines
    assert _line_of("MARK-branch-true") in lines["exp"] and _line_of("MARK-branch-false") in lines["square"], lines
    (g,) = df.vmap(df.gradients_function(f))(x)
    v = x.numpy()
    y = np.where(v > 0, np.exp(v), v * v)
    np.testing.assert_allclose(g.numpy(), np.exp(-y) * np.where(v > 0, np.exp(v), 2 * v))
