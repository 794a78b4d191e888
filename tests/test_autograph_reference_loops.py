"""AutoGraph against the loop behaviours of TensorFlow's AutoGraph reference tests (loops,
break/continue/return in loops, nested control flow, loop scoping, illegal cases); see
tests/test_autograph_reference.py for how the names map and what is compared."""

import numpy as np  # noqa: F401
import pytest

import defun as df
from autograph_reference_helpers import KINDS, _product, matches_eager, refused, same, scope, tensor  # noqa: F401


# ---------------------------------------------------------------------------------------
# loops
def while_one_var(n):
    k = 0
    while k < n:
        k = k * 10 + 1
    return k


def while_two_vars(n):
    s, k = 0, 0
    while k < n:
        s = s * 10 + k
        k += 1
    return s


def for_two_vars(seq):
    s = 0
    for k in seq:
        s = s * 10 + k
    return s


def for_keeps_last(seq):
    k = 0
    for k in seq:
        pass
    return k


def successive_whiles(n1, n2):
    s, k = 0, 0
    while k < n1:
        s = s * 10 + k
        k += 1
    k = 0
    while k < n2:
        s = s * 10 + k
        k += 1
    return s


def successive_fors(a, b):
    s = 0
    for k in a:
        s = s * 10 + k
    for k in b:
        s = s * 10 + k
    return s


def nested_whiles_collect(n1, n2):
    rows = []
    i = 0
    while i < n1:
        j, s = 0, 0
        while j < n2:
            s = s * 10 + i * j
            j += 1
        rows.append(s)
        i += 1
    return df.stack(rows)


def nested_fors_collect(m):
    rows = []
    for r in m:
        s = 0
        for v in r:
            s = s * 10 + v
        rows.append(s)
    return df.stack(rows)


def counts_with_variable(n, v):
    v.assign(0)
    while v.read_value() < n:
        v.assign_add(1)
    return v.read_value()


SEQS = [[], [1], [1, 2], [1, 2, 3]]


@pytest.mark.parametrize("fn,n,kind", _product([while_one_var, while_two_vars], [0, 1, 2, 3], KINDS))
def test_while_loops(fn, n, kind):
    matches_eager(fn, KINDS[kind](n))


@pytest.mark.parametrize("fn,seq,kind", _product([for_two_vars, for_keeps_last], SEQS, ["list", "tensor"]))
def test_for_loops(fn, seq, kind):
    matches_eager(fn, list(seq) if kind == "list" else tensor(seq))


@pytest.mark.parametrize("n1,n2,kind", _product([0, 1, 2], [0, 1, 2], KINDS))
def test_successive_and_nested_whiles(n1, n2, kind):
    matches_eager(successive_whiles, KINDS[kind](n1), KINDS[kind](n2))
    if n1:      # eagerly, df.stack of no rows has no dtype to give
        matches_eager(nested_whiles_collect, KINDS[kind](n1), KINDS[kind](n2))


@pytest.mark.parametrize("a,b,kind", _product([[], [1], [1, 2]], [[], [3]], ["list", "tensor"]))
def test_successive_fors(a, b, kind):
    conv = list if kind == "list" else tensor
    matches_eager(successive_fors, conv(a), conv(b))


@pytest.mark.parametrize("m", [[[1]], [[1], [2]], [[1, 2]], [[1, 2], [3, 4]]])
def test_nested_fors_collect_rows(m):
    matches_eager(nested_fors_collect, tensor(m))


@pytest.mark.parametrize("n,kind", _product([0, 1, 2], KINDS))
def test_a_loop_with_only_a_variable(n, kind):
    n = KINDS[kind](n)
    same(df.defun(counts_with_variable)(n, df.Variable(5)), counts_with_variable(n, df.Variable(5)))


def while_else(x, y):
    s = 0
    while x > 0:
        x -= 1
        if x > y:
            break
        s += x
    else:
        s = -100
    return s


def for_else(a, b):
    s = 0
    for c in a:
        if c > b:
            break
        s = s * 10 + c
    else:
        s = -1000
    return s


@pytest.mark.parametrize("n1,n2,kind", _product([0, 2], [0, 2], KINDS))
def test_while_else_and_for_else_which_tf_refuses(n1, n2, kind):
    matches_eager(while_else, KINDS[kind](n1), KINDS[kind](n2))
    seq = [1, n1 + 1]
    matches_eager(for_else, seq if kind == "py" else tensor(seq), KINDS[kind](n2))


def while_creates_var(n):
    k = 0
    while k < n:
        k = n + 1
        j = k + 1
    return k, j


def for_creates_var(seq):
    for k in seq:
        pass
    return k


def test_loop_created_vars_legal_on_python_values_refused_on_tensors():
    matches_eager(while_creates_var, 2)
    matches_eager(for_creates_var, [1, 2])
    refused(while_creates_var, tensor(2), match="'j' has no value.*only inside the tensor loop")
    refused(for_creates_var, tensor([1, 2]), match="'k' has no value.*only inside the tensor loop")


# ---------------------------------------------------------------------------------------
# break / continue / return in loops
def continue_in_for(seq):
    s = 0
    for c in seq:
        if c % 2 > 0:
            continue
        s += c
    return s


def break_in_for(seq):
    s = 0
    for c in seq:
        if c % 2 > 0:
            break
        s += c
    return s


def continue_in_while(x):
    s = 0
    while x > 0:
        x -= 1
        if x % 2 > 0:
            continue
        s += x
    return s


def break_in_while(x):
    s = 0
    while x > 0:
        x -= 1
        if x % 2 > 0:
            break
        s += x
    return s


def return_in_while(x):
    s = 0
    while x > 0:
        x -= 1
        s += x
        if x % 2 > 0:
            return s
        else:
            return -s
    return s


def return_in_for(seq):
    s = 0
    for c in seq:
        s += c
        return s
    return s


def two_breaks(n):
    s, k = 1, 0
    while k < n:
        k += 1
        if k > 10 * n:
            break
        if df.equal(k, n):     # `==` on a tensor in a condition is refused: df.equal
            break
        s = s * 10 + k
    return k, s


def break_then_cond(x):
    while x > 0:
        if x == 2:
            break
        if x > 0:
            x -= 1
    return x


@pytest.mark.parametrize("fn,seq,kind", _product([continue_in_for, break_in_for], SEQS + [[2, 4, 5, 6]],
                                                          ["list", "tensor"]))
def test_break_and_continue_in_a_for(fn, seq, kind):
    matches_eager(fn, list(seq) if kind == "list" else tensor(seq))


@pytest.mark.parametrize("fn,n,kind", _product([continue_in_while, break_in_while, return_in_while],
                                                        [1, 2, 3, 4], KINDS))
def test_break_continue_and_return_in_a_while(fn, n, kind):
    matches_eager(fn, KINDS[kind](n))


@pytest.mark.parametrize("seq,kind", _product([[1], [1, 2], [3, 4, 5]], ["list", "tensor"]))
def test_unconditional_return_in_a_for(seq, kind):
    matches_eager(return_in_for, list(seq) if kind == "list" else tensor(seq))


@pytest.mark.parametrize("n,kind", _product([0, 1, 2, 3, 4], KINDS))
def test_two_breaks_and_a_break_before_a_cond(n, kind):
    matches_eager(two_breaks, KINDS[kind](n))
    if kind == "tensor" and n == 2:
        return      # `x == 2` on a tensor in a condition: refused, as df.equal is meant
    if kind == "py":
        matches_eager(break_then_cond, n)


def test_equality_on_a_tensor_in_a_loop_condition_is_refused():
    refused(break_then_cond, tensor(3), match="df.equal")


def continue_in_inner_for(m):
    s = 0
    for r in m:
        for c in r:
            if c % 2 > 0:
                continue
            s += c
    return s


def break_in_inner_for(m):
    s = 0
    for r in m:
        for c in r:
            if c % 2 > 0:
                break
            s += c
    return s


def break_continue_in_inner_for(m):
    s = 0
    for r in m:
        for c in r:
            if c % 2 > 0:
                break
            else:
                continue
            s += c     # never reached
    return s


def continue_in_inner_while(x, y):
    s = 0
    while x > 0:
        x -= 1
        while y > 0:
            y -= 1
            if (x + y) % 2 > 0:
                continue
            s += x + y
    return s


def break_in_inner_while(x, y):
    s = 0
    while x > 0:
        x -= 1
        while y > 0:
            y -= 1
            if (x + y) % 2 < 1:
                break
            s += x + y
    return s


MATRICES = [[[], []], [[1], [2]], [[1, 2], [3, 4]], [[2, 3, 4], [4, 5, 6]]]


@pytest.mark.parametrize("fn,m,kind", _product([continue_in_inner_for, break_in_inner_for,
                                                         break_continue_in_inner_for], MATRICES,
                                                        ["list", "tensor", "list of tensors"]))
def test_break_and_continue_in_an_inner_for(fn, m, kind):
    arg = m if kind == "list" else tensor(m) if kind == "tensor" else [tensor(r) for r in m]
    if kind == "list of tensors" and not m[0]:
        arg = [df.zeros([0], df.int32) for _ in m]
    matches_eager(fn, arg)


@pytest.mark.parametrize("fn,x,y,kind", _product([continue_in_inner_while, break_in_inner_while],
                                                          [0, 1, 3], [0, 2, 4], KINDS))
def test_break_and_continue_in_an_inner_while(fn, x, y, kind):
    matches_eager(fn, KINDS[kind](x), KINDS[kind](y))


def tensor_break_in_python_for(seq):
    s = 0
    for c in seq:
        if df.greater(c % 2, 0):
            break
        s += c
    return s


def tensor_return_in_python_while(x):
    s = 0
    while x > 0:
        x -= 1
        if df.greater(x % 2, 0):
            return s
        s += x
    return s


@pytest.mark.parametrize("n", [1, 2, 3])
def test_tensor_break_or_return_in_a_python_loop_which_tf_refuses(n):
    matches_eager(tensor_break_in_python_for, list(range(2, 2 + n)))
    matches_eager(tensor_return_in_python_while, n)


# ---------------------------------------------------------------------------------------
# nested control flow and scoping
def independent_ifs(x, y):
    z = 0
    if x > 0:
        if y > 0:
            z = x + y
    return z


def dependent_inner_if(x):
    y = 0
    if x > 0:
        y = -2 * x
        if y > 0:
            x = -3 * x
    else:
        y = 4 * x
    return x, y


def imbalanced_inner_if(x):
    y = 0
    if x > 0:
        if x < 3:
            y = -2 * x
            x = -3 * x
    return x, y


@pytest.mark.parametrize("x,y,kx,ky", _product([-1, 1], [-1, 1], KINDS, KINDS))
def test_nested_ifs(x, y, kx, ky):
    matches_eager(independent_ifs, KINDS[kx](x), KINDS[ky](y))
    matches_eager(dependent_inner_if, KINDS[kx](x))
    matches_eager(imbalanced_inner_if, KINDS[kx](x * 2))


_COUNTER = None


def bumps_a_global(x):
    y = 0
    if x > 0:
        if x > 0:
            global _COUNTER
            _COUNTER = 1 if _COUNTER is None else _COUNTER + 1
            y += _COUNTER
    return y


@pytest.mark.parametrize("x,want", [(1, 1), (0, None)])
def test_a_global_modified_in_a_python_if(x, want):
    global _COUNTER
    _COUNTER = None
    assert int(df.defun(bumps_a_global)(x)) == (1 if x else 0)
    assert _COUNTER == want


def inner_for(a, b):
    p = 0
    for _ in a:
        for j in b:
            p += j
    return p


def dependent_inner_for(a, b):
    r, s = 1, 0
    for _ in a:
        r += s
        for j in b:
            s += j
    return r


def inner_while(a, b):
    p = 0
    while a > 0:
        t = b
        while t > 0:
            p += 1
            t -= 1
        a -= 1
    return p


def if_in_for(a):
    k = 0
    for i in a:
        if i % 2 > 0:
            j = i // 2
            k += j
    return k


RANGES = {"range": range, "df.range": df.range}


@pytest.mark.parametrize("a,b,ra,rb", _product([0, 1, 2], [0, 1, 3], RANGES, RANGES))
def test_inner_loops_over_ranges(a, b, ra, rb):
    matches_eager(inner_for, RANGES[ra](a), RANGES[rb](b))
    matches_eager(dependent_inner_for, RANGES[ra](a), RANGES[rb](b))
    matches_eager(if_in_for, RANGES[ra](a + b))


@pytest.mark.parametrize("a,b,ka,kb", _product([0, 1, 2], [0, 1, 2], KINDS, KINDS))
def test_inner_whiles(a, b, ka, kb):
    matches_eager(inner_while, KINDS[ka](a), KINDS[kb](b))


def continue_in_scope(x):
    z = 0
    while x > 0:
        with scope():
            x = x - 1
            if x < 5:
                continue
            z = z + 1
    return z


def break_in_try(x):
    z = 0
    while x > 0:
        x = x - 1
        try:
            if x < 5:
                break
            z = z + 1
        finally:
            z = z + 10
    return z


@pytest.mark.parametrize("x,kind", _product([0, 4, 10], KINDS))
def test_jumps_inside_context_managers_and_try(x, kind):
    matches_eager(continue_in_scope, KINDS[kind](x))
    if kind == "py":       # a `finally` around a tensor break runs once, at trace time
        matches_eager(break_in_try, x)


def first_then_other(n):
    for i in range(n):
        if i < 1:
            a = 1
        else:
            a = 2
    return a


def counts_from_first(n):
    for i in range(n):
        if i < 1:
            a = 1
        else:
            a = a + 1
    return a


@pytest.mark.parametrize("n", [1, 2])
def test_loop_initializing_a_variable(n):
    matches_eager(first_then_other, n)
    matches_eager(counts_from_first, n)
    refused(first_then_other, tensor(n), match="'a' has no value.*only inside the tensor loop")
    refused(counts_from_first, tensor(n), match="'a'")


def local_in_for(seq):
    s = 0
    for i in seq:
        x = i + 2
        s = s * 10 + x
    return s


def local_in_while(x):
    s = 0
    while x > 0:
        y = x + 2
        s = s * 10 + y
        x -= 1
    return s


def reuses_iterate(seq):
    i, s = 7, 0
    for i in seq:
        s = s * 10 + i
    return i, s


def alters_iterate(seq):
    i, s = 7, 0
    for i in seq:
        i = 3 * i + 1
        s = s * 10 + i
    return i, s


def lambdas_with_defaults(seq):
    fns, results = [], []
    for i in seq:
        fns.append(lambda i=i: i + i)
    for f in fns:
        results.append(f())
    return results


@pytest.mark.parametrize("seq,kind", _product([[], [1], [1, 2]], ["list", "tensor", "range", "df.range"]))
def test_loop_scoping(seq, kind):
    arg = {"list": list(seq), "tensor": tensor(seq), "range": range(len(seq)),
           "df.range": df.range(len(seq))}[kind]
    matches_eager(local_in_for, arg)
    matches_eager(reuses_iterate, arg)
    matches_eager(alters_iterate, arg)
    matches_eager(local_in_while, len(seq) if kind == "list" else tensor(len(seq)))
    if kind == "list" and seq:
        matches_eager(lambdas_with_defaults, seq)

