"""TraceCalls: the call states of one trace (a ConcreteFunction), what runs in each and what
moves it on. `call(tensors)` is what a call of the trace runs; `last_call(args)` is what
`Function` tries first when this trace ran its last call (None: nothing to try). WATCHED:
the trace captured tensors or variables by global or closure names, checked per call.

state         what `call(tensors)` runs                    `last_call(args)`             moved on by
------------  -------------------------------------------  ----------------------------  ----------------------------
FIRST         the general route while anyone listens; the  None                          that quiet call: to QUIET, or
(not yet      first quiet call compiles the plan, makes                                  to GENERAL when no runner can
compiled)     the runner and runs it                                                     be made (captures of an
                                                                                         enclosing trace, or a
                                                                                         variable argument it
                                                                                         returns)
QUIET         the runner (`run_flat`, generated per        the guarded runner: the same  nothing
              layout): the plan on the arrays while        call for eager tensors of the
              nobody listens, else the general route       trace's dtypes and shapes
                                                           (any size where the trace's
                                                           is unknown), else MISS
GENERAL       the general route                            None                          nothing
WATCHED       one identity test per watched name (one      None                          `unwatch()`, at the first
(a flag over  changed: StaleCaptureWarning), then what                                   stale name (once per
the three)    its state runs                                                             function): its state's row

"Nobody listens": this thread records on no tape and builds no trace (`state.quiet`; an
empty `busy_threads` says so for every thread at once) and no execution callback is set
(another thread's tape or trace does not count). The general route:
`GraphFunction.call_flat` on the tensors and the captured values (eagerly the plan; under a
tape the forward with side outputs and one tape entry; inside a trace a call node; with
callbacks, reported as one op), the variables passed as arguments appended, the outputs
packed as the trace returned them. `_move` is the one place the table is applied.

A relaxed trace (unknown argument sizes) runs, for argument shapes seen fewer than
HOT_CALLS times, its plan for the pattern of equal sizes among them (graph/specialize.py's
sizes_plan: sizes still unknown, those equal known so; at most MAX_PATTERNS patterns, then
its own plan), then a plan compiled from the trace made static for them (graph/
specialize.py: what an exact trace's plan runs), for at most MAX_SPECIALIZED shapes.
"""
import enum

from defun.runtime import dtypes, sites
from defun.runtime.context import busy_threads, execution_callbacks, state
from defun.runtime.tensor import EagerTensor, next_tensor_id
from defun.runtime.variables import _BY_HANDLE
from defun.graph.functions import plan_of
from defun.graph.size_labels import size_classes
from defun.graph.specialize import sizes_plan, specialize

__all__ = ["TraceCalls", "CallState", "MISS", "HOT_CALLS", "MAX_SPECIALIZED", "MAX_PATTERNS"]

# what `last_call(args)` returns for arguments it does not take as they are
MISS = object()

HOT_CALLS = 3
MAX_SPECIALIZED = 16
MAX_PATTERNS = 8


class CallState(enum.Enum):
    """A trace's call state (TraceCalls' table); being watched is a flag over these."""

    FIRST = "not yet compiled"
    QUIET = "quiet"
    GENERAL = "general"


FIRST, QUIET, GENERAL = CallState.FIRST, CallState.QUIET, CallState.GENERAL


class TraceCalls:
    """The call states of one trace: see the module's table.

        calls = concrete._calls
        calls.call(tensors)      # what this state runs
        calls.last_call(args)    # the guarded runner (QUIET, unwatched), or None
    """

    __slots__ = ("name", "graph", "fn", "captured", "arg_variables", "pack", "single", "state",
                 "watched", "call", "run", "last_call", "_runner", "_guarded", "_globals", "_cells",
                 "_on_stale", "_seen", "_specialized", "_dims", "_user_fn", "_patterns")

    def __init__(self, concrete):
        self.name, self.graph, self.fn = concrete.name, concrete.graph, concrete._fn
        self.captured = concrete._captured      # fixed once the trace is finalized
        self.arg_variables = concrete._arg_variables
        self.pack, self.single = concrete._pack, concrete._single
        self._on_stale = concrete._check_stale
        self._user_fn = concrete._function.python_function if concrete._function is not None else None
        self.watched = False
        self._globals = self._cells = ()    # watched names: (namespace, name, object); (cell, object)
        self._runner = self._guarded = None
        self._seen = {}           # a relaxed trace: its unknown sizes -> calls seen (see _hot)
        self._specialized = {}    # its unknown sizes -> the plan made static for them
        self._dims = None         # (argument, axis) of each unknown size, once the runner is made
        self._patterns = {}       # its classes of equal unknown sizes -> their plan (see _hot)
        self._move(FIRST)

    def _move(self, to):
        """Enter state `to` (the watched flag as it is): set what runs, by the table."""
        self.state = to
        self.run = self._first if to is FIRST else self._runner if to is QUIET else self.general
        self.call = self._checked if self.watched else self.run
        self.last_call = self._guarded if to is QUIET and not self.watched else None

    def watch(self, watched):
        """WATCHED: check these names, (namespace, name, the object it named, use site), per call."""
        self._globals = tuple((w, n, obj) for w, n, obj, _ in watched if type(w) is dict)
        self._cells = tuple((w, obj) for w, n, obj, _ in watched if type(w) is not dict)
        self.watched = bool(watched)
        self._move(self.state)

    def unwatch(self):
        self._globals = self._cells = ()
        self.watched = False
        self._move(self.state)

    # ------------------------------------------------------------------ what runs
    def general(self, tensors):
        """The general route: any call (eager, under a tape, inside a trace, with callbacks)."""
        outs = self.fn.call_flat([*tensors, *self.captured])
        if self.arg_variables:
            outs += [_BY_HANDLE[tensors[k]._id] for k in self.arg_variables]
        return self.pack(outs)

    def _first(self, tensors):
        """FIRST: the general route until a quiet call, which makes the runner."""
        if not state.quiet or execution_callbacks:
            return self.general(tensors)
        self._make_runner()
        return self.run(tensors)

    def _checked(self, tensors):
        # the usual case, every name unchanged, costs one identity test per name (about
        # 0.15 us for one global)
        for namespace, name, named in self._globals:
            if namespace.get(name) is not named:
                self._on_stale()
                break
        else:
            try:
                for cell, named in self._cells:
                    if cell.cell_contents is not named:
                        self._on_stale()
                        break
            except ValueError:      # an empty cell: the name was deleted
                pass
        return self.run(tensors)

    # ------------------------------------------------------------------ the runner
    def _make_runner(self):
        """Move FIRST on: the runner and guarded runner generated for this trace's layout
        (the plan compiled, the captured values read once, here), then QUIET; GENERAL when
        the trace has captures of an enclosing trace or returns a variable argument."""
        try:
            caps = [t._value for t in self.captured]
        except AttributeError:      # captures of an enclosing trace: only ever called in it
            caps = None
        if caps is None or self.arg_variables:
            self._move(GENERAL)
            return
        inputs = self.graph.inputs
        self._dims = _unknown_sizes(inputs)
        relaxed = self._relaxed_sizes()     # its runner runs _hot's plans: its own is compiled if needed
        ns = {"st": state, "busy": busy_threads, "callbacks": execution_callbacks, "general": self.general,
              "run": None if relaxed else self.fn.plan_run(), "new": object.__new__, "ET": EagerTensor,
              "nid": next_tensor_id, "pack": self.pack, "MISS": MISS, "spec": self._specialized, "hot": self._hot}
        ns.update((f"c{j}", v) for j, v in enumerate(caps))
        specs = [t.shape for t in inputs]
        guard = all(s is not None for s in specs)
        if guard:
            ns.update((f"s{i}", tuple(s)) for i, s in enumerate(specs))
            ns.update((f"s{i}_{k}", d) for i, s in enumerate(specs) for k, d in enumerate(s))
            ns.update((f"d{i}", t.dtype.np) for i, t in enumerate(inputs))
        exec(_runner_code(self._runner_source(len(caps), guard)), ns)  # noqa: S102 - every value bound in ns
        if self._user_fn is not None:      # tracebacks show the user's def, not `<defun call>`
            sites.runs_at_definition(ns, ("run_flat", "last_call"), self._user_fn)
        self._runner, self._guarded = ns["run_flat"], ns.get("last_call")
        self._move(QUIET)

    def _runner_source(self, n_caps, guard):
        """The source of `run_flat(tensors)` and, with `guard`, of `last_call(args)`: the
        same call when `args` are eager tensors of this trace's dtypes and shapes (any size
        where the trace's is unknown: a relaxed trace), else MISS. `Function` calls `last_call`
        of the trace its last call ran before anything else: one check per argument instead of
        a cache key and a lookup
        (one-op call of float32 (4,) tensors: 1.38-1.61 -> 0.87-0.96 us, np.add 0.30)."""
        inputs = self.graph.inputs
        n, n_out = len(inputs), len(self.graph.outputs)
        args = [f"a{i}" for i in range(n)]
        vals = [f"v{i}" for i in range(n)]
        body = [f"o = run({', '.join(vals + [f'c{j}' for j in range(n_caps)])})"]
        if self._relaxed_sizes():   # the plan for these sizes: see _hot
            sizes = f"({''.join(f'v{i}.shape[{k}], ' for i, k in self._dims)})" if self._dims is not None \
                else f"({''.join(f'{v}.shape, ' for v in vals)})"
            body = ["sp = spec.get(" + sizes + ")", "if sp is None:", "    sp = hot(" + sizes + ")",
                    f"o = sp({', '.join(vals + [f'c{j}' for j in range(n_caps)])})"]
        for j in range(n_out):
            body += [f"r{j} = new(ET)", f"r{j}._value = o[{j}]", f"r{j}._id = nid()"]
        body.append("return r0" if self.single else f"return pack([{', '.join(f'r{j}' for j in range(n_out))}])")
        lines = ["def run_flat(tensors):",
                 "    if (not busy or st.quiet) and not callbacks:"]
        if n:
            lines += [f"        {', '.join(args)}, = tensors",
                      "        try:",
                      f"            {', '.join(vals)}, = {', '.join(f'{a}._value' for a in args)},",
                      "        except AttributeError:",
                      "            return general(tensors)"]
        lines += ["        " + line for line in body] + ["    return general(tensors)"]
        if guard:
            checks = [f"type({a}) is ET" for a in args]
            same = [f"v{i}.dtype is d{i} and {_shape_test(f'v{i}', f's{i}', t.shape)}"
                    for i, t in enumerate(inputs)]
            lines += ["def last_call(args):",
                      f"    if len(args) == {n}:"]
            if n:
                lines += [f"        {', '.join(args)}, = args",
                          f"        if {' and '.join(checks)}:",
                          f"            {', '.join(vals)}, = {', '.join(f'{a}._value' for a in args)},"]
            lines += [f"            if {' and '.join(same + ['(not busy or st.quiet) and not callbacks'])}:"]
            lines += ["                " + line for line in body] + ["    return MISS"]
        return "\n".join(lines) + "\n"

    def _relaxed_sizes(self):
        """True for a trace with unknown argument sizes (and no variable arguments)."""
        inputs = self.graph.inputs
        return any(t.shape is not None and None in t.shape for t in inputs) and \
            all(t.dtype is not dtypes.resource for t in inputs)

    def _hot(self, sizes):
        """The plan a relaxed trace runs for arguments of `sizes` (their sizes the trace does
        not know, or with an argument of unknown rank their shapes): its own until those
        were seen HOT_CALLS times, then one compiled from the trace made static for them
        (the relaxed plan again if the graph refuses them: it then raises what it raises).
        Every caller has checked the sizes the trace knows (the cache key, or the guard)."""
        seen = self._seen
        count = seen.get(sizes, 0) + 1
        if count < HOT_CALLS or len(self._specialized) >= MAX_SPECIALIZED:
            if len(seen) < 4096:
                seen[sizes] = count
            return self._pattern_plan(sizes)
        try:
            run = plan_of(specialize(self.graph, self.shapes_of(sizes)), self.fn.backend).run
        except Exception:   # noqa: BLE001 - sizes the graph refuses: the relaxed plan says why
            run = self.fn.plan_run()
        self._specialized[sizes] = run
        return run

    def _pattern_plan(self, sizes):
        """The plan for sizes not yet hot: the trace's plan for which of them are equal (its
        own plan with an argument of unknown rank, past MAX_PATTERNS, or if that fails)."""
        if self._dims is None:
            return self.fn.plan_run()
        classes = size_classes(sizes)
        run = self._patterns.get(classes)
        if run is None:
            if len(self._patterns) >= MAX_PATTERNS:
                return self.fn.plan_run()
            try:
                run = sizes_plan(self.graph, classes, self.fn.backend).run
            except Exception:   # noqa: BLE001 - the trace's own plan runs and says what fails
                run = self.fn.plan_run()
            self._patterns[classes] = run
        return run

    def shapes_of(self, sizes):
        """The argument shapes of a relaxed trace's plan key `sizes` (see _hot)."""
        if self._dims is None:
            return sizes
        shapes = [list(t.shape) for t in self.graph.inputs]
        for (i, k), d in zip(self._dims, sizes):
            shapes[i][k] = d
        return tuple(tuple(s) for s in shapes)


def _unknown_sizes(inputs):
    """(argument, axis) of each size the placeholders `inputs` leave unknown, or None when
    one has an unknown rank (then a relaxed trace's plans are keyed by whole shapes)."""
    if any(t.shape is None for t in inputs):
        return None
    return tuple((i, k) for i, t in enumerate(inputs) for k, d in enumerate(t.shape) if d is None)


def _shape_test(v, s, shape):
    """Source testing that array `v` has `shape` (held in name `s`, size k in `s_k`): a tuple
    comparison, or for a shape with unknown sizes its rank and each known size. No size is
    written in the source, so traces of one layout share its compiled code (_runner_code)."""
    if None not in shape:
        return f"{v}.shape == {s}"
    return " and ".join([f"{v}.ndim == {len(shape)}"] +
                        [f"{v}.shape[{k}] == {s}_{k}" for k, d in enumerate(shape) if d is not None])


# runner source -> its code object: the source names every value of a trace (captures,
# shapes, dtypes, the plan) and writes none, so it depends only on the trace's layout
# (arity, captures, outputs, which sizes are unknown), and compiling it (0.5-0.8 ms for
# mlp_small's step) is done once per layout, not once per trace
_RUNNER_CODE = {}


def _runner_code(source):
    code = _RUNNER_CODE.get(source)
    if code is None:
        if len(_RUNNER_CODE) >= 512:
            _RUNNER_CODE.clear()
        code = _RUNNER_CODE[source] = compile(source, "<defun call>", "exec")
    return code
