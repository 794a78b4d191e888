"""Fused forms of ops: how a compiling backend (the numba one) runs an op inside one loop.

An op declares its form once, in its registry row (`register(..., fused=...)`); backends
without fusion ignore it. Three forms:

- `Elementwise(expr)`: one output element from the input elements at the same (broadcast)
  position. `expr` is a Python expression over `{0}`, `{1}`, ... (the inputs' scalars)
  using operators, numpy scalar functions (`np.tanh`, `np.maximum`, ...) and literals; the
  backend converts its value to the output dtype. `shape_of`: which input gives the output
  shape (None: the broadcast of all inputs; "attr": the `shape` attr). An `expr` may also
  be a callable `expr(num_inputs) -> str` (variadic ops).
- `Reduction(init, combine, final)`: an accumulator starting at `init` ("0", "1", or
  "lowest"/"highest" of the dtype), updated by `combine` over `{acc}` and `{x}`, finished
  by `final` over `{acc}` and `{n}` (the number of reduced elements). `identity=False`:
  reducing no elements is an error (max, min).
- `Kernel(fn, attrs, accepts, source)`: an array-level function in the numba-compilable
  subset of Python (loops over numpy arrays), called as `fn(*inputs, *attr values)` and
  returning the op's output array(s); `accepts(node)` says which nodes it is meant for
  (e.g. 2-D float matmuls). `source(node)`, when given and not None for a node, is an
  array expression over `{0}`, `{1}`, ... (the inputs' arrays) the region computes instead
  (e.g. `np.dot({0}, {1}.T)` for a large matmul, where BLAS is faster than loops): only
  what a node needs is compiled.

`kinds` restricts a form to inputs of those numpy kinds ("f" float, "i" int, "u", "b").
"""

__all__ = ["Elementwise", "Reduction", "Kernel"]


class Elementwise:
    __slots__ = ("expr", "kinds", "shape_of")

    def __init__(self, expr, kinds=None, shape_of=None):
        self.expr, self.kinds, self.shape_of = expr, kinds, shape_of

    def template(self, num_inputs):
        return self.expr(num_inputs) if callable(self.expr) else self.expr

    def __repr__(self):
        return f"Elementwise({self.expr!r})"


class Reduction:
    __slots__ = ("init", "combine", "final", "kinds", "identity")

    def __init__(self, init, combine, final="{acc}", kinds=None, identity=True):
        self.init, self.combine, self.final = init, combine, final
        self.kinds, self.identity = kinds, identity

    def __repr__(self):
        return f"Reduction({self.init!r}, {self.combine!r}, {self.final!r})"


class Kernel:
    __slots__ = ("fn", "attrs", "accepts", "source")

    def __init__(self, fn, attrs=(), accepts=None, source=None):
        self.fn, self.attrs, self.accepts, self.source = fn, tuple(attrs), accepts, source

    def __repr__(self):
        return f"Kernel({self.fn.__name__})"
