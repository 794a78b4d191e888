"""The executor: compile a function graph once into straight-line Python (what it knows of
the graph first, liveness and assignments, comes from graph/analysis.py).

`compile_graph(graph, backend=...)` decides the order at compile time (creation order is
topological and keeps stateful ops in program order), asks the backend (graph/backends.py)
to partition the live nodes into steps and for each node's kernel, drops each value after
its last use, and generates one Python function whose body is one line per step.
Names in the generated source are made here (a0, v3, k3), never taken from a graph or file.
Per call the cost is the kernels plus one Python call per node. On CPython 3.11 the
function's code is written from those lines by graph/plan_code.py: the bytes compile()
would make of the source, at about a fifth of compile()'s cost (a plan with lines of other
forms, or one that assigns, is compiled).

Where it points: the generated code's line numbers are rewritten to the user's source lines
(each statement to its node's recorded site, in the file most of the plan's nodes come
from), so a warning a kernel gives (numpy's RuntimeWarning for a NaN) and a traceback name
the user's file and line, never `<defun plan ...>`; a kernel written in Python, which runs
in a frame of its own, is bound as a copy reporting its node's site (`sites.function_at`,
made at compile time); a kernel's error is re-raised naming the node and that line
(`_fail`), by the plan's own bare `raise`, so the error's traceback has the plan's frame at
the failing node's line, not at the handler's. A backend may ask for a check after any step
(`Backend.output_check`: check numerics), compiled in as one more line.

A call that may assign is serializable and all-or-nothing: its plan holds the locks of the
variables it receives for the call, logs each variable's old value before assigning (in a
per-thread undo log shared with the plans it calls) and undoes the log when the call fails,
KeyboardInterrupt included (the section "Calls that assign" below).
"""
import collections
import ctypes
import sys
import threading
from types import FunctionType, TracebackType

from defun.runtime import dtypes, errors, sites
from defun.runtime.collector import paused_gc
from defun.runtime.execute import describe_value
from defun.runtime.ops.resource_ops import ASSIGN_OPS, VariableStore
from defun.graph.analysis import assigns_variables, live_nodes
from defun.graph.backends import Backend, Region, get_backend
from defun.graph.nodes import CONST, PLACEHOLDER
from defun.graph import plan_code
from defun.graph.printer import format_node
from defun.graph.size_labels import size_labels

__all__ = ["compile_graph", "Plan"]


class Plan:
    """A compiled function: `plan(*arrays) -> tuple of arrays` (`source`: its Python)."""

    __slots__ = ("run", "source", "graph", "backend", "num_inputs", "num_outputs")

    def __call__(self, *args):
        return self.run(*args)


# ---------------------------------------------------------------------------------------
# Calls that assign: variable locks and the undo log (one place).
#
# A plan that may assign (itself or through a plan it runs) is one transaction:
# - it holds the lock of every variable it receives (its resource inputs) for the whole
#   call, taken in `serial` order, so two calls writing the same variables never interleave
#   (they are serializable) and cannot deadlock; eager assignments wait for the lock too;
# - it logs each variable's old value before assigning, in a per-thread undo log shared
#   with the plans it runs, and when the call fails (any BaseException: a KeyboardInterrupt
#   too) undoes the log, newest first, before releasing the locks. Nobody else could write
#   the variables meanwhile, so restoring old values never loses another thread's update.
# The outermost such plan starts the log and takes and releases the locks; nested plans
# (calls, branches, loop bodies) append to its log and take no lock: every handle they see
# came through the outermost plan's inputs. The clean-up in `_end` runs in `finally` and
# finishes even when an interrupt lands inside it. Plans that
# never assign take no lock and keep no log: they pay nothing, and their reads see each
# variable's latest value.
class _UndoLog(threading.local):
    log = None      # the running call's [(variable store, old value)], or None (no call)


_undo = _UndoLog()


def _begin(outer, stores, held):
    """Start the thread's transaction (outer None: lock `stores`, listing the locks in
    `held`) or join the caller's; returns the undo log."""
    if outer is not None:
        return outer
    log = _undo.log = []
    if len(stores) > 1:
        stores = sorted(stores, key=_lock_order)
    for s in stores:
        if type(s) is VariableStore:    # anything else fails on the node that uses it
            lock = s.lock
            held.append(lock)    # listed first: an interrupt before acquiring is harmless
            lock.acquire()
    return log


def _lock_order(store):
    return getattr(store, "serial", -1)


def _end(outer, start, ok, held):
    """Finish a call: undo its log entries from `start` unless `ok`; the outermost call
    (outer None) also ends the log and releases `held`. Every step can be repeated
    (restore then pop; release then pop), so after an interrupt the plan calls it again."""
    if not ok:
        log = _undo.log
        if log is not None:
            _rollback(log, start)
    if outer is None:
        _undo.log = None
        _release(held)


def _end_again(pending, outer, start, ok, held):
    """`_end` until it completes, after interrupts landed in it twice; then raise the last
    one. Only an interrupt landing on this function's entry or between two of its attempts
    could still stop it."""
    while True:
        try:
            _end(outer, start, ok, held)
            break
        except BaseException as e:
            pending = e
    raise pending


def _rollback(undo, start=0):
    """Undo the assignments logged from `start` on, newest first, and drop them from the log
    (an enclosing call that goes on after catching the failure must not undo them twice)."""
    while len(undo) > start:
        h, old = undo[-1]
        h.value = old
        undo.pop()


def _release(held):
    while held:
        try:
            held[-1].release()
        except RuntimeError:     # not held: an interrupt came between listing and acquiring,
            pass                 # or after releasing and before popping
        held.pop()


def _log_assignment(handle_var):
    """The plan line saving a variable's value before an assign node overwrites it."""
    return f"_u.append(({handle_var}, {handle_var}.value))"


def _undo_head(resource_args):
    """Lines before the body of a plan that may assign (_o: the caller's log, None when this
    call starts one; _m: where this call's entries start; _h: the locks it took; _ok: the
    body finished). Everything that can need undoing happens inside the `try`."""
    stores = "".join(f"{a}, " for a in resource_args)
    return (["    _o = _undo.log", "    _m = 0 if _o is None else len(_o)", "    _h = []",
             "    _ok = False", "    try:", f"        _u = _begin(_o, ({stores}), _h)"])


_UNDO_OK = ["        _ok = True"]
# An interrupt can land anywhere in the clean-up, even on the way into `_end` (a function's
# first instruction checks for signals). Nested handlers call it again: between two
# attempts no instruction checks for signals, so a second and a third interrupt are caught
# too, and `_end_again` then repeats it in a loop; the interrupt is raised once the clean-up
# is complete. The handlers cost nothing when nothing is raised.
_UNDO_FINALLY = ["    finally:",
                 "        try:",
                 "            _end(_o, _m, _ok, _h)",
                 "        except BaseException:",
                 "            try:",
                 "                _end(_o, _m, _ok, _h)",
                 "            except BaseException as _x:",
                 "                _end_again(_x, _o, _m, _ok, _h)",
                 "            raise"]


# ---------------------------------------------------------------------------------------
def compile_graph(graph, outputs=None, backend=None, sizes=None):
    """Compile `graph` (its all_inputs -> `outputs`, default graph.outputs) into a Plan that
    runs on `backend` (a name or a Backend; default numpy). `sizes`: for a graph with
    unknown argument sizes, which of them the calls it runs have equal (graph/
    size_labels.py): results are then written over dead temporaries of provably the same
    shape, as for known shapes."""
    backend = get_backend(backend)
    outputs = list(graph.outputs if outputs is None else outputs)
    with paused_gc():
        nodes = live_nodes(graph, outputs)
        steps = backend.partition(nodes, outputs)
        writer = _PlanWriter(graph, outputs, steps, backend)
        if sizes is not None:
            writer.labels = size_labels(graph, sizes)
        for pos, step in enumerate(steps):
            if isinstance(step, Region):
                writer.region(pos, step)
            else:
                writer.node(pos, step)
        memo = {}
        return writer.finish(may_assign=any(assigns_variables(n, memo) for n in nodes))


class _PlanWriter:
    """The generated plan's source, one step at a time (names made here: a0, v3, k3, c3)."""

    BODY = "        "
    labels = None   # id(tensor) -> its shape, unknown sizes labelled (compile_graph's `sizes`)

    def __init__(self, graph, outputs, steps, backend):
        self.graph, self.outputs, self.backend = graph, outputs, backend
        self.inputs = graph.all_inputs
        self.ns = {"_fail": _fail, "_begin": _begin, "_end": _end, "_end_again": _end_again,
                   "_undo": _undo}
        self.var_of = {id(t): f"a{i}" for i, t in enumerate(self.inputs)}
        self.input_nodes = {id(t.node) for t in self.inputs}
        self.lines, self.line_node = [], {}
        # Nodes binding the same function share one global name (all tanh nodes call `k1`):
        # fewer distinct names make compile() of a 10,000-node plan ~10% faster.
        self.kernel_names = {}
        self.at_site = {}   # (id(kernel), site) -> (kernel, its copy reporting the site)
        # last use of each value (by step position), to free buffers early; outputs never.
        # Buffer reuse: a fresh result that only kernels keeping no view of their inputs
        # read (so no view of it exists) may be overwritten by the one reading it last,
        # saving an allocation: `out_only` holds those values (one sweep finds both).
        last_use = self.last_use = {}
        plain_read, viewed = set(), set()
        for pos, step in enumerate(steps):
            reads = plain_read if not isinstance(step, Region) and backend.keeps_no_views(step) \
                else viewed
            for t in step.inputs:
                last_use[id(t)] = pos
                reads.add(id(t))
        for t in outputs:
            last_use[id(t)] = -1
        self.out_only = plain_read - viewed
        self.reusable = set()   # id(tensor): fresh arrays of this plan nothing else aliases
        # a backend keeping the base class's output_check checks nothing: no call per step
        self.checks = getattr(backend.output_check, "__func__", None) is not Backend.output_check

    def _kernel_name(self, fn, node_id, site=None):
        if site is not None and type(fn) is FunctionType:
            # A Python kernel runs in a frame of its own, which is what numpy's warnings (and
            # tracebacks) name: a copy of it reporting the node's site names the user's line
            # (made once per kernel and site; ufuncs run in the plan's frame, which does)
            key = (id(fn), site)
            hit = self.at_site.get(key)
            if hit is None:
                hit = self.at_site[key] = (fn, sites.function_at(fn, site))
            fn = hit[1]
        kname = self.kernel_names.get(id(fn))
        if kname is None:
            kname = self.kernel_names[id(fn)] = f"k{node_id}"
            self.ns[kname] = fn
        return kname

    def _emit(self, stmt, node):
        self.lines.append(self.BODY + stmt)
        self.line_node[len(self.lines)] = node

    def _assign_names(self, tensors, base):
        names = [f"{base}_{k}" for k in range(len(tensors))]
        for t, v in zip(tensors, names):
            self.var_of[id(t)] = v
        return f"{', '.join(names)}{',' if len(names) == 1 else ''}"

    def _free_dead(self, pos, inputs, kept=None):
        """`del` the values (of nodes: not inputs or constants) whose last use is step `pos`,
        but the name `kept` (the step's result, written over that value)."""
        dead = None
        last_use, var_of = self.last_use, self.var_of
        for t in inputs:
            if last_use[id(t)] == pos:
                v = var_of[id(t)]
                if v[0] == "v" and v != kept:
                    dead = [v] if dead is None else dead + [v]
        if dead is not None:
            self.lines.append(f"{self.BODY}del {', '.join(sorted(set(dead)))}")

    def node(self, pos, n):
        # (one method with the helpers' fast paths inlined: it runs once per node compiled)
        if id(n) in self.input_nodes:
            return
        op, var_of = n.op, self.var_of
        if op is PLACEHOLDER:
            raise errors.InvalidArgumentError(
                f"function {self.graph.name!r}: placeholder {n.name} is not one of its inputs")
        if op is CONST:
            cname = f"c{n.id}"
            self.ns[cname] = n.attrs["value"]
            var_of[id(n.outputs[0])] = cname
            return
        backend = self.backend
        fn, pass_attrs = backend.kernel(n)
        inputs, outs = n.inputs, n.outputs
        args = [var_of[id(t)] for t in inputs]
        if pass_attrs:
            for j, (k, v) in enumerate(sorted(n.attrs.items())):
                self.ns[f"t{n.id}_{j}"] = v
                args.append(f"{k}=t{n.id}_{j}")
        reused = positional = None
        if outs and not pass_attrs and backend.writes_out(n, fn):
            out = outs[0]
            labels = self.labels
            shape = out.shape if labels is None else labels.get(id(out))
            if shape and None not in shape:     # _fresh_result, inlined
                target = _reusable_input(inputs, out, pos, self.reusable, self.last_use, labels)
                if target is not None:   # write the result over a dead temporary: no allocation
                    reused = var_of[id(target)]
                    positional = backend.out_positional(n, fn)
                    args.append(reused if positional else f"out={reused}")
                if id(out) in self.out_only:
                    self.reusable.add(id(out))
        kname = self.kernel_names.get(id(fn)) if type(fn) is not FunctionType else None
        if kname is None:   # (a kernel met before, not a Python function: no call)
            kname = self._kernel_name(fn, n.id, n.site)
        call = f"{kname}({', '.join(args)})"
        if op.name in ASSIGN_OPS:    # a bad handle fails on this line: it names the node
            self._emit(_log_assignment(var_of[id(inputs[0])]), n)
        if not outs:
            stmt = call
        elif op.single:
            # A result written over a dead temporary is that same array: it takes over the
            # temporary's name (`v1 = k3(v1, c2, out=v1)`, or `k3(v1, c2, v1)` when the kernel
            # takes it positionally), so no `del` line follows (a statement fewer for
            # compile(), ~4 us per node of a chain).
            v = var_of[id(outs[0])] = reused or f"v{n.id}"
            stmt = call if positional else f"{v} = {call}"
        else:
            reused = None
            stmt = f"{self._assign_names(outs, f'v{n.id}')} = {call}"
        lines = self.lines
        lines.append(self.BODY + stmt)
        self.line_node[len(lines)] = n
        if outs and self.checks:
            self._check(n, [var_of[id(t)] for t in outs], args[:len(inputs)], n)
        if reused is None or len(inputs) > 1:     # else its one input is the name it keeps
            self._free_dead(pos, inputs, reused)

    def region(self, pos, r):
        first = r.nodes[0]
        args = ", ".join(self.var_of[id(t)] for t in r.inputs)
        names = self._assign_names(r.outputs, f"v{first.id}r")
        self._emit(f"{names} = {self._kernel_name(r.kernel, first.id, first.site)}({args})", first)
        if self.checks:
            self._check(r, [self.var_of[id(t)] for t in r.outputs], args.split(", ") if args else [], first)
        self._free_dead(pos, r.inputs)

    def _check(self, step, names, inputs, node):
        """The backend's check of a step's outputs (`names`; its inputs `inputs`), if it asks
        for one: `check((outputs...), (inputs...))`."""
        check = self.backend.output_check(step)
        if check is not None:
            self.ns[f"q{node.id}"] = check
            self._emit(f"q{node.id}(({''.join(v + ', ' for v in names)}), ({''.join(v + ', ' for v in inputs)}))",
                       node)

    def finish(self, may_assign):
        for t in self.outputs:
            if id(t) not in self.var_of:
                raise errors.InvalidArgumentError(
                    f"function {self.graph.name!r}: output {t.name} is not computed by the function")
        ret = ", ".join(self.var_of[id(t)] for t in self.outputs)
        head = [f"def plan({', '.join(f'a{i}' for i in range(len(self.inputs)))}):"]
        if may_assign:
            head += _undo_head([f"a{i}" for i, t in enumerate(self.inputs) if t.dtype is dtypes.resource])
        else:
            head.append("    try:")
        tail = (_UNDO_OK if may_assign else []) + \
            [f"{self.BODY}return ({ret}{',' if len(self.outputs) == 1 else ''})",
             "    except Exception as _e:", "        _fail(_e)", "        raise"]
        tail += _UNDO_FINALLY if may_assign else []
        source = "\n".join(head + self.lines + tail) + "\n"
        lineno_node = {len(head) + k: n for k, n in self.line_node.items()}
        self.ns["_lines"] = lineno_node
        self.ns["_var_names"] = self.var_of   # id(tensor) -> its name, for error messages
        run = self._function(source, lineno_node, may_assign)
        self.ns["_code"] = run.__code__
        plan = Plan()
        plan.run, plan.source, plan.graph, plan.backend = run, source, self.graph, self.backend.name
        plan.num_inputs, plan.num_outputs = len(self.inputs), len(self.outputs)
        return plan

    def _function(self, source, lineno_node, may_assign):
        """The plan's function, reporting the user's lines: its code written by plan_code
        when it can be (the bytes compile() makes of `source`, ~5x faster), else compiled."""
        name = f"<defun plan {self.graph.name}>"
        user = _user_line_table(lineno_node, 1, source.count("\n") + 1)
        written = None if may_assign else plan_code.assemble(
            self.lines, len(self.inputs), [self.var_of[id(t)] for t in self.outputs], name, *(user or (None, None)))
        if written is not None:
            self.ns["_generated"] = written[1]      # its lines are the source's, for _fail
            run = self.ns["plan"] = FunctionType(written[0], self.ns, "plan")
            return run
        exec(compile(source, name, "exec"), self.ns)
        run = self.ns["plan"]
        self.ns["_generated"] = run.__code__
        if user is not None:
            run.__code__ = sites.relocated(run.__code__, user[0], user[1], 1)
        return run


def _fresh_result(t):
    """A ufunc result that is surely an array of its own: static, fully known, rank >= 1."""
    return t.shape and None not in t.shape


def _reusable_input(inputs, out, pos, reusable, last_use, labels=None):
    """The input a node's fresh result `out` may be written over: a reusable value of the
    same type whose last use is this step (`pos`), read once by the node; or None.
    `labels`: shapes with unknown sizes labelled (size_labels), compared instead."""
    # (the candidate first: most inputs are not reusable, and then the node's inputs need
    # no test for repeats; every step input is in last_use)
    for t in inputs:
        if id(t) in reusable and last_use[id(t)] == pos and t.dtype is out.dtype and \
                (t.shape == out.shape if labels is None else labels.get(id(t)) == labels.get(id(out))):
            break
    else:
        return None
    n = len(inputs)
    if n > 1 and (inputs[0] is inputs[1] if n == 2 else len({id(u) for u in inputs}) != n):
        return None     # the same value twice: leave it alone
    reusable.discard(id(t))
    return t


def _user_line_table(lineno_node, base, n_lines):
    """Where a plan's generated lines `base`..`n_lines` point: (file, [the user's line of
    generated line base + k]), or None (no site, or Python < 3.11: the generated lines stay).
    A node's line is the line of its site, in the file most of the plan's sites are in;
    other lines (and nodes of other files) the line of the node before them. The code's
    bytecode is the same; only its location table and file name change (sites.relocated)."""
    if sys.version_info < (3, 11):
        return None
    files = collections.Counter(n.site[0] for n in lineno_node.values() if n.site)
    if not files:
        return None
    filename = files.most_common(1)[0][0]
    mapped = {g: n.site[1] for g, n in lineno_node.items() if n.site and n.site[0] == filename}
    last = mapped[min(mapped)]
    user = []                       # generated line base + k -> the user's line
    for g in range(base, n_lines + 1):
        last = mapped.get(g, last)
        user.append(last)
    return filename, user


def _generated_line(code, offset):
    """The generated source's line of the instruction at byte `offset` of plan `code`."""
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return line
    return None


def _fail(exc):
    """Name the node that was executing in kernel failure `exc`: defun's error or a warning
    turned error (-W error) gets it in its message (unless it already names it, as check
    numerics' do) and the plan re-raises it (one traceback, the plan's frame at the node's
    line); any other becomes an InvalidArgumentError (MemoryError: ResourceExhaustedError)
    caused by it, which the plan re-raises (_reraised_as). A failure inside a fused region
    may name the region's node that failed and the values it got (`exc.failed_node`, set by
    its numpy run): that node is named, and the plan's frame put at its line."""
    if getattr(exc, "attributed", False):
        return
    head = tb = exc.__traceback__
    frame_globals = sys._getframe(1).f_globals
    code = frame_globals["_code"]
    node = frame = None
    while tb is not None:
        if tb.tb_frame.f_code is code:
            node = frame_globals["_lines"].get(_generated_line(frame_globals["_generated"], tb.tb_lasti))
            frame = tb.tb_frame
        tb = tb.tb_next
    if node is None:
        return
    inside = getattr(exc, "failed_node", None)
    if inside is not None:
        del exc.failed_node     # (a plan running this one names its own node)
        node, got = inside
        if node.site and node.site[0] == head.tb_frame.f_code.co_filename:
            head = TracebackType(head.tb_next, head.tb_frame, _lineless(code), node.site[1])
    else:
        # the values the node got: its input variables are still alive on the failing line
        names = frame_globals["_var_names"]
        scope = {**frame_globals, **frame.f_locals}
        got = [scope.get(names.get(id(t))) for t in node.inputs]
    where = f" (traced at {sites.format_site(node.site)})" if node.site else ""
    given = ""
    if got and all(v is not None for v in got):
        given = " on " + ", ".join(describe_value(v) for v in got)
    if isinstance(exc, MemoryError):
        return _reraised_as(errors.out_of_memory(f"while executing {format_node(node)}{given}{where}", exc), exc, head)
    msg = f"while executing {format_node(node)}{given}{where}: {exc}"
    if not isinstance(exc, (errors.DefunError, Warning)):
        return _reraised_as(errors.InvalidArgumentError(msg), exc, head)
    exc.args = (msg,)     # the same exception: its traceback keeps the plan's frame at the node
    exc.__traceback__ = head


def _lineless(code):
    """The offset of an instruction of `code` that has no line (the handler's first), so that
    a traceback entry at it shows its own line number (tb_lineno), without column marks."""
    for k, position in enumerate(code.co_positions()):
        if position[0] is None:
            return 2 * k
    return -1


def _reraised_as(error, exc, head):
    """Make `error` (caused by `exc`) the exception the plan's handler is handling, so that
    its bare `raise` raises it: a `raise` would add the plan's frame at the handler's line
    (the last node's user line); re-raised, `error`'s traceback is `head`, the plan's frame
    at the failing node's line (the kernel's own frames are in `exc`'s)."""
    error.__cause__ = error.__context__ = exc
    if _set_handled is None or head is None or head.tb_frame is not sys._getframe(2):
        raise error from exc
    error.__traceback__ = TracebackType(None, head.tb_frame, head.tb_lasti, head.tb_lineno)
    _set_handled(error)


# The C API's PyErr_SetHandledException (3.11+): sets what a bare `raise` re-raises.
_set_handled = getattr(ctypes.pythonapi, "PyErr_SetHandledException", None) \
    if sys.version_info >= (3, 11) and hasattr(ctypes, "pythonapi") else None
if _set_handled is not None:
    _set_handled.argtypes, _set_handled.restype = (ctypes.py_object,), None
