"""graph/plan_code.py writes a plan's code object without compile(): the same bytes, names,
constants, stack size and exception table compile() makes of the plan's source, and the
user's lines where graph/executor.py's relocation of compile()'s code puts them; lines of
other forms (a check's tuples, an undo log) leave the source to compile()."""
import random
import re
import sys

import numpy as np
import pytest

import defun as df
from graph_helpers import F32, F64, build
from defun.graph import executor, plan_code
from defun.graph.backends import get_backend
from defun.graph.checking import checking_backend
from defun.graph.executor import compile_graph
from defun.graph.passes import optimize
from defun.runtime import sites

pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="plan_code writes 3.11's bytecode")

_FIELDS = ("co_code", "co_names", "co_varnames", "co_consts", "co_stacksize", "co_exceptiontable",
           "co_argcount", "co_nlocals", "co_flags", "co_name", "co_qualname", "co_filename")


def _parts(source):
    """(body lines, number of inputs, output names) of a plan's source."""
    lines = source.splitlines()
    end = next(k for k, line in enumerate(lines) if line.startswith("        return ("))
    ret = [x.rstrip(",") for x in lines[end].strip()[len("return ("):-1].split(", ") if x]
    return lines[2:end], len(re.findall(r"\ba\d+", lines[0])), ret


def _by_offset(code):
    return {offset: line for start, end, line in code.co_lines() for offset in range(start, end, 2)}


def _assert_compile_makes(written, source, name="<defun plan f>"):
    namespace = {}
    exec(compile(source, name, "exec"), namespace)
    compiled = namespace["plan"].__code__
    for field in _FIELDS:
        assert getattr(written, field) == getattr(compiled, field), field
    assert _by_offset(written) == _by_offset(compiled)
    return compiled


def _random_source(rng, n_lines):
    """A plan source of the executor's line forms over random names (kernels k*, constants c*,
    attrs t*, values v*): calls with and without targets, several targets, keywords, dels."""
    n_inputs = rng.randint(1, 4)
    live, lines = [f"a{i}" for i in range(n_inputs)], []
    for node in range(10, 10 + n_lines):
        args = [rng.choice(live) for _ in range(rng.randint(0, 4) if rng.random() < 0.97 else rng.randint(29, 40))]
        args += [f"c{rng.randint(1, 600)}"] if rng.random() < 0.3 else []
        keywords = rng.sample(["axis", "out", "keepdims"], rng.randint(0, 2)) if rng.random() < 0.3 and \
            len(args) < 25 else []
        call = f"k{rng.randint(1, 400)}({', '.join(args + [f'{k}={rng.choice(live)}' for k in keywords])})"
        r = rng.random()
        if r < 0.55:
            lines.append(f"        v{node} = {call}")
            live.append(f"v{node}")
        elif r < 0.7:
            names = [f"v{node}_{j}" for j in range(rng.randint(1, 3) if rng.random() < 0.9 else 40)]
            lines.append(f"        {', '.join(names)}{',' if len(names) == 1 else ''} = {call}")
            live += names
        elif r < 0.9 or len(live) < n_inputs + 2:
            lines.append(f"        {call}")
        else:
            dead = sorted(set(rng.sample([x for x in live if x[0] == "v"], 1 + (rng.random() < 0.5))))
            lines.append(f"        del {', '.join(dead)}")
            live = [x for x in live if x not in dead]
    ret = rng.sample(live, min(len(live), rng.choice([1, 2, 3, 31, 45])))
    return (f"def plan({', '.join(f'a{i}' for i in range(n_inputs))}):\n    try:\n" + "\n".join(lines) +
            f"\n        return ({', '.join(ret)}{',' if len(ret) == 1 else ''})\n"
            "    except Exception as _e:\n        _fail(_e)\n        raise\n")


@pytest.mark.parametrize("seed", range(12))
def test_random_sources_are_written_as_compile_makes_them(seed):
    """Up to 700 lines: more than 256 names, locals and constants (EXTENDED_ARG prefixes)."""
    rng = random.Random(seed)
    source = _random_source(rng, [3, 40, 300, 700][seed % 4])
    lines, n_inputs, ret = _parts(source)
    written = plan_code.assemble(lines, n_inputs, ret, "<defun plan f>", None, None)
    assert written is not None and written[0] is written[1]
    _assert_compile_makes(written[1], source)


def test_small_frames_are_written_as_compile_makes_them():
    for body in (["        k1()"], ["        v1 = k1()"], ["        k1(a0)", "        del a0"], []):
        source = ("def plan(a0):\n    try:\n" + "".join(line + "\n" for line in body) +
                  "        return (a0, c1,)\n    except Exception as _e:\n        _fail(_e)\n        raise\n")
        written = plan_code.assemble(body, 1, ["a0", "c1"], "<defun plan f>", None, None)
        _assert_compile_makes(written[1], source)



@pytest.mark.parametrize("n_targets, n_returned", [(1, 31), (23, 50), (3, 30), (29, 45)])
def test_a_long_return_is_written_with_compiles_stack_size(n_targets, n_returned):
    """Past 30 values the return builds a list a value at a time (two on the stack), so
    its stack size is the body's (the written one said 30: safe, but not compile()'s)."""
    names = [f"v1_{j}" for j in range(n_targets)]
    body = [f"        {', '.join(names)}{',' if n_targets == 1 else ''} = k1(a0)"]
    ret = (names * n_returned)[:n_returned]
    source = ("def plan(a0):\n    try:\n" + body[0] + f"\n        return ({', '.join(ret)})\n"
              "    except Exception as _e:\n        _fail(_e)\n        raise\n")
    written = plan_code.assemble(body, 1, ret, "<defun plan f>", None, None)
    _assert_compile_makes(written[1], source)

def _chain_of_distinct_constants(x):
    for k in range(300):                # 300 constants: global names past 256
        x = df.tanh(x) * (1.0 + k / 1000)
    return x


def _many_live_values(x):
    parts = [df.sin(x * float(k)) for k in range(300)]    # 300 values alive at once
    return df.add_n(parts)


def _mlp_step(x, w, b, v):
    with df.GradientTape() as tape:
        tape.watch([w, b])
        h = df.tanh(df.matmul(x, w) + b)
        loss = df.reduce_mean(df.reduce_sum(h * h, axis=1)) + df.reduce_sum(v[0])
        parts = df.split(h, 2, axis=1)
    return (loss, parts[0], *tape.gradient(loss, [w, b]))


_GRAPHS = {
    "chain": ([((16,), F32)], _chain_of_distinct_constants),
    "live": ([((4,), F64)], _many_live_values),
    "mlp": ([((8, 6), F32), ((6, 4), F32), ((4,), F32), ((2, 3), F32)], _mlp_step),
}


@pytest.mark.parametrize("name", sorted(_GRAPHS))
def test_plans_of_graphs_are_written_as_compile_makes_them(name, monkeypatch):
    types, fn = _GRAPHS[name]
    g = optimize(build(name, types, fn))
    compiled = []
    monkeypatch.setattr(executor, "compile", lambda *a: compiled.append(a) or compile(*a), raising=False)
    plan = compile_graph(g)
    assert not compiled                 # written, not compiled
    generated, user = plan.run.__globals__["_generated"], plan.run.__code__
    reference = _assert_compile_makes(generated, plan.source, f"<defun plan {g.name}>")
    # the user's lines: where the executor's relocation of compile()'s code puts them
    lineno_node = plan.run.__globals__["_lines"]
    table = executor._user_line_table(lineno_node, 1, plan.source.count("\n") + 1)
    assert table is not None and user.co_filename == table[0] == __file__
    relocated = sites.relocated(reference, table[0], table[1], 1)
    assert user.co_firstlineno == relocated.co_firstlineno and _by_offset(user) == _by_offset(relocated)
    assert user.co_code == generated.co_code
    # and the plan computes what the graph does, as the compiled source does
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(d.np) for s, d in types]
    namespace = dict(plan.run.__globals__)
    exec(compile(plan.source, "<reference>", "exec"), namespace)
    for got, want in zip(plan.run(*args), namespace["plan"](*args)):
        np.testing.assert_array_equal(got, want)


def test_lines_of_other_forms_are_compiled():
    """A check after each step (`q3((v3, ), (v1, ))`) and a plan that assigns variables
    (its undo log) are compiled from their source."""
    g = optimize(build("f", [((3,), F32)], lambda x: df.exp(df.tanh(x))))
    plan = compile_graph(g, backend=checking_backend(get_backend("numpy")))
    lines, n_inputs, ret = _parts(plan.source)
    assert any(line.startswith("        q") for line in lines)
    assert plan_code.assemble(lines, n_inputs, ret, "<defun plan f>", None, None) is None
    np.testing.assert_allclose(plan.run(np.ones(3, np.float32))[0], np.exp(np.tanh(np.ones(3))), rtol=1e-6)
    v = df.Variable(np.zeros(3, np.float32))
    step = df.defun(lambda x: v.assign_add(x * 2.0))
    step(df.constant(np.ones(3, np.float32)))
    step(df.constant(np.ones(3, np.float32)))
    np.testing.assert_array_equal(v.numpy(), [4.0, 4.0, 4.0])


def test_a_line_the_writer_cannot_write_leaves_the_source_to_compile():
    body = [f"        v99 = k1({', '.join(['a0'] * 28)}, axis=a0, out=a0)"]    # 28 + 2 x 2 > 30: a dict
    assert plan_code.assemble(body, 1, ["v99"], "<defun plan f>", None, None) is None
    body = ["        v1 = k1(a0)", "        v2 = k2(v1.T)"]       # an attribute: not a plan form
    assert plan_code.assemble(body, 1, ["v2"], "<defun plan f>", None, None) is None
    body = ["        k1 = k2(a0)", "        v3 = k1(a0)"]         # a local called: compiled
    assert plan_code.assemble(body, 1, ["v3"], "<defun plan f>", None, None) is None
    body = ["        v1 = k1(c2)", "        c2 = k2(v1)"]         # a global, then assigned
    assert plan_code.assemble(body, 1, ["v1"], "<defun plan f>", None, None) is None
