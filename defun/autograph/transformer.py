"""The rewrite of one function's syntax tree (Python's `ast`): every `if`, `while`, `for`,
`break`, `continue`, `return` inside them, conditional expression, `and`/`or`/`not`,
`assert` and call becomes a call into defun/autograph/operators.py (`ag__.*`), which
decides when it runs between graph control flow and Python. Every new node carries the
line of the statement it replaces, so errors and tracebacks show the user's lines.

A statement's branches and loop bodies become nested functions that reach the converted
function's variables by `nonlocal`; `get_state`/`set_state` beside them read and write
the variables they assign. `break`/`continue`/`return` set flags (`brk__N`, `cnt__N`,
`do_return__`) that guard the statements after them and end the loop.

This module is long because the rewrite of each kind of statement and expression stays
whole beside the few analyses they share (names bound, jumps and returns found, locations).
"""
import ast

AG = "ag__"
GEN = "__agf"              # marks the functions the rewrite adds
RETURN_FLAG, RETVAL = "do_return__", "retval__"
_FRAME_CALLS = {"super", "locals", "globals", "vars", "eval", "exec", "dir"}
_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "add",
             "discard", "popitem", "sort", "reverse"}


_LOAD, _STORE = ast.Load(), ast.Store()     # shared, as ast.parse shares them (nothing changes them)


def _name(i, store=False):
    return ast.Name(id=i, ctx=_STORE if store else _LOAD)


def _attribute(dotted, store=False):
    """`obj.attr` of 'obj.attr'."""
    obj, attr = dotted.split(".")
    return ast.Attribute(value=_name(obj), attr=attr, ctx=_STORE if store else _LOAD)


def _ag(attr):
    return ast.Attribute(value=_name(AG), attr=attr, ctx=_LOAD)


def _call(func, *args):
    return ast.Call(func=func, args=list(args), keywords=[])


def _const(v):
    return ast.Constant(value=v)


def _args(params=()):
    return ast.arguments(posonlyargs=[], args=[ast.arg(arg=p) for p in params], vararg=None,
                         kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])


def _lambda(body):
    return ast.Lambda(args=_args(), body=body)


def _def(name, params, body):
    node = ast.FunctionDef(name=name, args=_args(params), body=body or [ast.Pass()], decorator_list=[],
                           returns=None, type_comment=None)
    if "type_params" in ast.FunctionDef._fields:
        node.type_params = []
    return node


def _assign(name, value):
    return ast.Assign(targets=[_name(name, True)], value=value)


def _head(src):
    """(line, first column, last column) of statement `src`'s first line (a compound
    statement's header: its test or iterable when they end on that line)."""
    end = src.end_col_offset if src.end_lineno == src.lineno else None
    for field in ("test", "iter", "value"):
        e = getattr(src, field, None)
        if isinstance(e, ast.AST) and getattr(e, "end_lineno", None) == src.lineno:
            end = e.end_col_offset
    return src.lineno, src.col_offset, end if end is not None else src.col_offset + 1


def _located(nodes, src):
    """`nodes` with the location of `src`'s first line on every new node that has none (a
    node that has one is the user's, or was located before: not entered)."""
    line, col, end = _head(src)
    todo = list(nodes)
    while todo:
        sub = todo.pop()
        if not isinstance(sub, ast.AST):        # an item of a list field that is no node (a name, None)
            continue
        fields = sub.__dict__       # a node's fields and locations (a missing location: not there)
        if "lineno" in fields:
            continue
        for v in fields.values():
            if type(v) is list:
                todo.extend(v)
            elif isinstance(v, ast.AST):
                todo.append(v)
        if "lineno" in sub._attributes:     # (after the walk of its fields: not walking these too)
            sub.lineno, sub.col_offset, sub.end_lineno, sub.end_col_offset = line, col, line, end
    return nodes


def _skip_scope(node):
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
                             ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp))


def walk_scope(nodes):
    """The nodes of statements `nodes`, not entering nested functions, lambdas, classes or
    comprehensions (their own scopes)."""
    todo = list(nodes)
    while todo:
        n = todo.pop()
        yield n
        if not _skip_scope(n):
            todo.extend(ast.iter_child_nodes(n))


_TARGETS = {ast.Assign: ("targets",), ast.AugAssign: ("target",), ast.AnnAssign: ("target",),
            ast.For: ("target",), ast.AsyncFor: ("target",), ast.Delete: ("targets",)}
_BLOCKS = ("body", "orelse", "finalbody", "handlers")


def _stores(stmts):
    """(name, line) for each name statements `stmts` bind, in order, walking statements and
    their targets only (not other expressions; a walrus is found where the function has one,
    see _facts), nor nested scopes; a function the rewrite added gives its nonlocal list."""
    for s in stmts:
        fields = _TARGETS.get(type(s))
        if fields is not None:
            for f in fields:
                for t in (getattr(s, f) if isinstance(getattr(s, f), list) else [getattr(s, f)]):
                    if type(t) is ast.Name:
                        yield t.id, t.lineno
                        continue
                    yield from ((n.id, n.lineno) for n in ast.walk(t) if isinstance(n, ast.Name)
                                and isinstance(n.ctx, ast.Store))
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if GEN not in s.name:
                yield s.name, s.lineno
                continue
            for d in s.body[:2]:
                if isinstance(d, (ast.Nonlocal, ast.Global)):
                    yield from ((i, s.lineno) for i in d.names)
            continue
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            yield from (((a.asname or a.name).split(".")[0], s.lineno) for a in s.names)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                if item.optional_vars is not None:
                    yield from ((n.id, n.lineno) for n in ast.walk(item.optional_vars) if isinstance(n, ast.Name))
        elif isinstance(s, ast.ExceptHandler) and s.name:
            yield s.name, s.lineno
        if _WALRUS:
            yield from ((n.target.id, n.lineno) for n in walk_scope([s]) if isinstance(n, ast.NamedExpr)
                        and not isinstance(n, ast.stmt))
        for field in _BLOCKS:
            inner = getattr(s, field, None)
            if inner:
                yield from _stores(inner)


def _statements(stmts):
    """Statements `stmts` and those inside them (not inside nested functions or classes)."""
    for s in stmts:
        yield s
        if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in _BLOCKS:
                inner = getattr(s, field, None)
                if inner:
                    yield from _statements(inner)


def assigned(nodes):
    """Names the (rewritten) statements bind, in first-seen order: stores, defs, imports,
    and the `nonlocal`/`global` lists of the functions the rewrite added."""
    names = {}
    for name, _ in _stores(nodes):
        names.setdefault(name, None)
    return [i for i in names if GEN not in i]


def mutated_roots(stmts):
    """Names of the Python objects statements `stmts` change in place (`x[k] = v`, `x[k] += v`,
    `del x[k]`, `x.append(v)`, ...), in first-seen order, not entering nested scopes."""
    roots = {}
    for s in _statements(stmts):
        targets = s.targets if isinstance(s, (ast.Assign, ast.Delete)) else \
            [s.target] if isinstance(s, (ast.AugAssign, ast.AnnAssign)) else []
        targets = [t for t in targets if isinstance(t, ast.Subscript)]
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Attribute) \
                and s.value.func.attr in _MUTATORS:
            targets.append(s.value.func)
        for t in targets:
            while isinstance(t, (ast.Attribute, ast.Subscript)):
                t = t.value
            if isinstance(t, ast.Name):
                roots.setdefault(t.id, None)
    return list(roots)


def attribute_stores(stmts):
    """{'obj.attr': line} for each `obj.attr = v` (or `+=`) that statements `stmts` make on a
    name `obj`, in first-seen order, not entering nested scopes: a tensor `if` carries them."""
    out = {}
    for s in _statements(stmts):
        targets = s.targets if isinstance(s, ast.Assign) else \
            [s.target] if isinstance(s, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            for n in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
                    out.setdefault(f"{n.value.id}.{n.attr}", n.lineno)
    return out


def first_lines(nodes):
    """((name, line of its first assignment), ...) in the original statements `nodes`."""
    lines = {}
    for name, line in sorted(_stores(nodes), key=lambda p: p[1]):
        lines.setdefault(name, line)
    return tuple(lines.items())


class _Loop:
    __slots__ = ("brk", "cnt", "assigned", "appends")

    def __init__(self, brk, cnt, assigned_names):
        self.brk, self.cnt, self.assigned, self.appends = brk, cnt, set(assigned_names), set()


class _Ctx:
    __slots__ = ("globals", "nonlocals", "loop", "returns")

    def __init__(self, globals_, nonlocals, loop, returns):
        self.globals, self.nonlocals, self.loop, self.returns = globals_, nonlocals, loop, returns

    def inside(self, loop):
        return _Ctx(self.globals, self.nonlocals, loop, self.returns)


_FACTS = {}      # id(node) -> (holds a return, a break of its loop, a continue of its loop)
_WALRUS = []     # non-empty while converting a function that holds a walrus (:=)
_SCAN = []       # non-empty while converting a function that may hold one: expressions are walked for it


def _facts(node):
    """(return, break, continue) found in `node`, not entering nested scopes; a break or
    continue inside a nested loop belongs to that loop. Kept per node while converting."""
    got = _FACTS.get(id(node))
    if got is not None and got[0] is node:
        return got[1]
    if isinstance(node, ast.Return):
        out = (True, False, False)
    elif isinstance(node, ast.Break):
        out = (False, True, False)
    elif isinstance(node, ast.Continue):
        out = (False, False, True)
    elif _skip_scope(node):
        out = (False, False, False)
    elif isinstance(node, ast.NamedExpr):
        _WALRUS.append(True)
        out = _facts(node.value)
    else:
        ret = brk = cnt = False
        loop = isinstance(node, (ast.For, ast.While, ast.AsyncFor))
        for field, value in ast.iter_fields(node):
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST) and (_SCAN or not isinstance(child, ast.expr)):
                    r, b, c = _facts(child)
                    ret |= r
                    if not (loop and field == "body"):
                        brk, cnt = brk | b, cnt | c
        out = (ret, brk, cnt)
    _FACTS[id(node)] = (node, out)
    return out


def _jumps(nodes, kind):
    """True if `kind` (ast.Break/Continue) occurs in `nodes` for the loop they are in (not
    in a nested loop)."""
    k = 1 if kind is ast.Break else 2
    return any(_facts(n)[k] for n in nodes)


def _never_undefined(e):
    """True if expression `e`'s value cannot be an ag__.Undefined (so `return e` needs no
    ag__.retval check): arithmetic and comparisons raise on one (values.py), a constant is none."""
    return isinstance(e, (ast.BinOp, ast.Compare, ast.Constant, ast.JoinedStr)) or \
        isinstance(e, ast.UnaryOp) and not isinstance(e.op, ast.Not)


def always_returns(stmts):
    """True if running statements `stmts` always ends in a `return` (or a raise)."""
    for s in stmts:
        if isinstance(s, (ast.Return, ast.Raise)):
            return True
        if isinstance(s, ast.If) and s.orelse and always_returns(s.body) and always_returns(s.orelse):
            return True
        if isinstance(s, ast.With) and always_returns(s.body):
            return True
        if isinstance(s, ast.Try) and (always_returns(s.finalbody) or always_returns(s.body + s.orelse) and
                                       all(always_returns(h.body) for h in s.handlers)):
            return True
    return False


def _returns(nodes):
    return any(_facts(n)[0] for n in nodes)


class Converter:
    """Rewrites function definitions; one per conversion (it numbers what it adds)."""

    def __init__(self):
        self.count = 0

    def fresh(self):
        self.count += 1
        return self.count

    # ------------------------------------------------------------------ functions
    def function(self, fdef, walrus=True):
        """`fdef` (FunctionDef or Lambda) rewritten, a new node. `walrus=False`: its source
        holds no `:=` (then the search for one, a walk of every expression, is left out)."""
        try:
            if walrus:
                _SCAN.append(True)
            for s in fdef.body if isinstance(fdef.body, list) else []:
                _facts(s)           # (also notes a walrus)
            return self._function(fdef)
        finally:
            _FACTS.clear()
            _WALRUS.clear()
            _SCAN.clear()

    def _function(self, fdef):
        if isinstance(fdef, ast.Lambda):
            return ast.Lambda(args=self.arguments(fdef.args), body=self.expr(fdef.body))
        decl = [n for n in _statements(fdef.body) if isinstance(n, (ast.Global, ast.Nonlocal))]
        globals_ = {i for d in decl if isinstance(d, ast.Global) for i in d.names}
        nonlocals = {i for d in decl if isinstance(d, ast.Nonlocal) for i in d.names}
        returns = any(_facts(s)[0] for s in fdef.body if not isinstance(s, ast.Return))   # inside a statement
        ctx = _Ctx(globals_, nonlocals, None, returns)
        params = [a.arg for a in fdef.args.posonlyargs + fdef.args.args + fdef.args.kwonlyargs]
        params += [a.arg for a in (fdef.args.vararg, fdef.args.kwarg) if a is not None]
        defined = set(params) | globals_ | nonlocals | ({RETURN_FLAG, RETVAL} if returns else set())
        src = list(fdef.body)
        if returns and not always_returns(src):
            src.append(_located([ast.Return(value=None)], src[-1])[0])
        body = self.block(src, ctx, defined)
        if returns:
            head = _located([_assign(RETURN_FLAG, _const(False)),
                             _assign(RETVAL, _call(_ag("Undefined"), _const(RETVAL)))], fdef.body[0])
            tail = _located([ast.Return(value=_call(_ag("retval"), _name(RETVAL)))], fdef.body[-1])
            body = head + body + tail
        new = ast.FunctionDef(name=fdef.name, args=self.arguments(fdef.args), body=body, decorator_list=[],
                              returns=None, type_comment=None)
        if "type_params" in ast.FunctionDef._fields:
            new.type_params = []
        return ast.copy_location(new, fdef)

    def arguments(self, args):
        a = ast.arguments(**{f: getattr(args, f) for f in args._fields})
        a.defaults = [self.expr(d) for d in args.defaults]
        a.kw_defaults = [None if d is None else self.expr(d) for d in args.kw_defaults]
        return a

    # ------------------------------------------------------------------ blocks
    def block(self, stmts, ctx, defined):
        out = []
        for i, s in enumerate(stmts):
            if isinstance(s, ast.Return) and ctx.returns:
                value = self.expr(s.value) if s.value is not None else _const(None)
                # the value first: if computing it raises, the function has not returned
                out += _located([_assign(RETVAL, value), _assign(RETURN_FLAG, _const(True))], s)
                return out
            if isinstance(s, (ast.Break, ast.Continue)) and ctx.loop is not None:
                flag = ctx.loop.brk if isinstance(s, ast.Break) else ctx.loop.cnt
                out += _located([_assign(flag, _const(True))], s)
                return out
            if isinstance(s, ast.Return) and s.value is not None:
                value = self.expr(s.value)
                out += _located([ast.Return(value=value if _never_undefined(s.value) else _call(_ag("retval"), value))],
                                s)
                return out
            rest = stmts[i + 1:]
            if ctx.returns and rest and isinstance(s, ast.If) and always_returns(s.body) != always_returns(s.orelse):
                # `if c: ... return a` then more: the more is the other branch (one cond, not two)
                joined = (s.body, s.orelse + rest) if always_returns(s.body) else (s.body + rest, s.orelse)
                s = ast.copy_location(ast.If(test=s.test, body=joined[0], orelse=joined[1]), s)
                out += self.stmt(s, ctx, defined)
                return out
            out += self.stmt(s, ctx, defined)
            if ctx.returns and always_returns([s]):
                return out          # what follows is never reached
            flags = self.flags(s, ctx)
            rest = stmts[i + 1:]
            if flags and rest:
                guard = ast.If(test=self.not_any(flags), body=rest, orelse=[])
                out += self.stmt(_located([guard], rest[0])[0], ctx, defined, generated=True)
                return out
        return out

    def flags(self, s, ctx):
        out = []
        if ctx.returns and _returns([s]):
            out.append(RETURN_FLAG)
        if ctx.loop is not None:
            if ctx.loop.brk and _jumps([s], ast.Break):
                out.append(ctx.loop.brk)
            if ctx.loop.cnt and _jumps([s], ast.Continue):
                out.append(ctx.loop.cnt)
        return out

    def not_any(self, flags):
        test = _name(flags[-1])
        for f in reversed(flags[:-1]):
            test = _call(_ag("or_"), _name(f), _lambda(test))
        return _call(_ag("not_"), test)

    def stmt(self, s, ctx, defined, generated=False):
        if isinstance(s, ast.If):
            return self.if_(s, ctx, defined, generated)
        if isinstance(s, ast.While):
            return self.while_(s, ctx, defined)
        if isinstance(s, ast.For):
            return self.for_(s, ctx, defined)
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            new = self._function(s) if isinstance(s, ast.FunctionDef) else s
            new.decorator_list = [self.expr(d) for d in s.decorator_list]
            defined.add(s.name)
            return [new]
        if isinstance(s, (ast.With, ast.Try)):
            return [self.nested_blocks(s, ctx, defined)]
        if isinstance(s, ast.Assert):
            msg = _lambda(self.expr(s.msg)) if s.msg is not None else _const(None)
            return _located([ast.Expr(value=_call(_ag("assert_stmt"), self.condition(s.test), msg,
                                                  _const(s.lineno)))], s)
        out = self.mutation(s, ctx)
        if out is None:
            new = self.expr(s) if not isinstance(s, (ast.ClassDef, ast.Global, ast.Nonlocal)) else s
            out = self.checks(s, ctx) + [new]
        defined.update(assigned([s]))
        return out

    def nested_blocks(self, s, ctx, defined):
        new = self.expr_fields(s)
        for field in ("body", "orelse", "finalbody"):
            if getattr(s, field, None):
                setattr(new, field, self.block(getattr(s, field), ctx, set(defined)) or [ast.Pass()])
        if isinstance(s, ast.Try):
            new.handlers = [ast.ExceptHandler(type=h.type and self.expr(h.type), name=h.name,
                                              body=self.block(h.body, ctx, set(defined)) or [ast.Pass()],
                                              lineno=h.lineno, col_offset=h.col_offset) for h in s.handlers]
        defined.update(assigned([s]))
        return new

    def expr_fields(self, s):
        """A copy of compound statement `s` with its own expressions (not blocks) rewritten."""
        new = type(s)(**{f: getattr(s, f) for f in s._fields})
        ast.copy_location(new, s)
        if isinstance(s, ast.With):
            new.items = [ast.withitem(context_expr=self.expr(i.context_expr), optional_vars=i.optional_vars)
                         for i in s.items]
        return new

    # ------------------------------------------------------------------ loops: mutation
    def mutation(self, s, ctx):
        """`name.append(v)` in a loop body as `name = ag__.list_append(name, v)`, or None."""
        loop = ctx.loop
        if loop is None or not isinstance(s, ast.Expr) or not isinstance(s.value, ast.Call):
            return None
        c = s.value
        if (isinstance(c.func, ast.Attribute) and c.func.attr == "append" and isinstance(c.func.value, ast.Name)
                and len(c.args) == 1 and not c.keywords and not isinstance(c.args[0], ast.Starred)):
            name = c.func.value.id
            loop.appends.add(name)
            return _located([_assign(name, _call(_ag("list_append"), _name(name), self.expr(c.args[0])))], s)
        return None

    def checks(self, s, ctx):
        """Checks that a Python object made before the loop is not changed in a tensor loop."""
        loop = ctx.loop
        if loop is None:
            return []
        roots = []
        if isinstance(s, (ast.Assign, ast.Delete)):
            targets = s.targets
        elif isinstance(s, (ast.AugAssign, ast.AnnAssign)):
            targets = [s.target]
        else:
            targets = []
        for t in targets:
            if isinstance(t, (ast.Attribute, ast.Subscript)):
                roots.append(t)
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Attribute) \
                and s.value.func.attr in _MUTATORS:
            roots.append(s.value.func.value)
        out = []
        for r in roots:
            while isinstance(r, (ast.Attribute, ast.Subscript)):
                r = r.value
            if isinstance(r, ast.Name) and r.id not in loop.assigned:
                out += _located([ast.Expr(value=_call(_ag("check_mutation"), _const(r.id), _const(s.lineno)))], s)
        return out

    # ------------------------------------------------------------------ if
    def state_functions(self, n, names, ctx, s, deleted=()):
        """get_state/set_state of statement `s` (a name in `deleted`, which `del` may unbind, is
        read as ag__.ld gives it: Undefined when it has no value)."""
        decl = self.declarations(names, ctx)
        values = [_call(_ag("ld_attr"), _lambda(_attribute(i)), _const(i)) if "." in i else
                  _call(_ag("ld"), _lambda(_name(i)), _const(i)) if i in deleted else _name(i) for i in names]
        get = _def(f"get_state{GEN}{n}", [], [ast.Return(value=ast.Tuple(elts=values, ctx=_LOAD))])
        target = ast.Tuple(elts=[_attribute(i, True) if "." in i else _name(i, True) for i in names], ctx=_STORE)
        put = _def(f"set_state{GEN}{n}", ["vals__"],
                   decl + ([ast.Assign(targets=[target], value=_name("vals__"))] if names else []))
        return _located([get, put], s)

    def declarations(self, names, ctx):
        out = []
        names = [i for i in names if "." not in i]      # obj.attr: set on obj, nothing to declare
        local = [i for i in names if i not in ctx.globals]
        glob = [i for i in names if i in ctx.globals]
        if local:
            out.append(ast.Nonlocal(names=local))
        if glob:
            out.append(ast.Global(names=glob))
        return out

    def bindings(self, names, defined, ctx, s):
        """`x = ag__.ld(lambda: x, 'x')` for each name with maybe no value yet, so that the
        nested functions' `nonlocal x` finds x (and reads Undefined when it has none)."""
        out = []
        for i in names:
            if i not in defined and i not in ctx.globals and i not in ctx.nonlocals and "." not in i:
                out.append(_assign(i, _call(_ag("ld"), _lambda(_name(i)), _const(i))))
                defined.add(i)
        return _located(out, s)

    def if_(self, s, ctx, defined, generated=False):
        n = self.fresh()
        test = self.condition(s.test) if not generated else s.test
        roots = mutated_roots(s.body + s.orelse)      # before the blocks are rewritten
        attrs = [attribute_stores(b) for b in (s.body, s.orelse)]
        body = self.block(s.body, ctx, set(defined))
        orelse = self.block(s.orelse, ctx, set(defined))
        names = assigned(body + orelse)
        changed = [i for i in roots if i in defined and i not in names]
        names += changed        # objects changed in place: each branch changes its own copy
        names += [a for a in {**attrs[0], **attrs[1]} if a.split(".")[0] not in names]   # self.x = ...
        pre = self.bindings(names, defined, ctx, s)
        decl = self.declarations(names, ctx)
        defs = [_def(f"if_true{GEN}{n}", [], decl + body), _def(f"if_false{GEN}{n}", [], decl + orelse)]
        info = (s.lineno, first_lines(s.body) + tuple(attrs[0].items()), first_lines(s.orelse)
                + tuple(attrs[1].items()), tuple(changed))
        call = _call(_ag("if_stmt"), test, _name(f"if_true{GEN}{n}"), _name(f"if_false{GEN}{n}"),
                     _name(f"get_state{GEN}{n}"), _name(f"set_state{GEN}{n}"), _const(tuple(names)), _const(info))
        deleted = {t.id for d in _statements(s.body + s.orelse) if isinstance(d, ast.Delete) for t in d.targets
                   if isinstance(t, ast.Name)}
        return (pre + _located(defs, s) + self.state_functions(n, names, ctx, s, deleted)
                + _located([ast.Expr(value=call)], s))

    # ------------------------------------------------------------------ while / for
    def loop_start(self, s, ctx, defined):
        n = self.fresh()
        brk = f"brk__{n}" if _jumps(s.body, ast.Break) else None
        cnt = f"cnt__{n}" if _jumps(s.body, ast.Continue) else None
        loop = _Loop(brk, cnt, [name for name, _ in _stores([s])])
        pre = _located([_assign(brk, _const(False))], s) if brk else []
        if brk:
            defined.add(brk)
        return n, loop, pre

    def loop_end(self, s, loop, ctx, defined):
        if not s.orelse:
            return []
        if not loop.brk:
            return self.block(s.orelse, ctx, defined)
        guard = _located([ast.If(test=_call(_ag("not_"), _name(loop.brk)), body=s.orelse, orelse=[])], s.orelse[0])
        return self.stmt(guard[0], ctx, defined, generated=True)

    def stop_flags(self, s, loop, ctx):
        flags = [f for f in (loop.brk,) if f]
        if ctx.returns and _returns(s.body):
            flags.append(RETURN_FLAG)
        return flags

    def while_(self, s, ctx, defined):
        n, loop, pre = self.loop_start(s, ctx, defined)
        inner = ctx.inside(loop)
        body = self.block(s.body, inner, set(defined))
        if loop.cnt:
            body = _located([_assign(loop.cnt, _const(False))], s) + body
        test = self.condition(s.test)
        flags = self.stop_flags(s, loop, ctx)
        if flags:
            test = _call(_ag("and_"), self.not_any(flags), _lambda(test))
        names = assigned(body)
        pre += self.bindings(names, defined, ctx, s)
        decl = self.declarations(names, ctx)
        defs = [_def(f"loop_test{GEN}{n}", [], [ast.Return(value=test)]), _def(f"loop_body{GEN}{n}", [], decl + body)]
        info = (s.lineno, first_lines(s.body), tuple(sorted(loop.appends)))
        call = _call(_ag("while_stmt"), _name(f"loop_test{GEN}{n}"), _name(f"loop_body{GEN}{n}"),
                     _name(f"get_state{GEN}{n}"), _name(f"set_state{GEN}{n}"), _const(tuple(names)), _const(info))
        out = pre + _located(defs, s) + self.state_functions(n, names, ctx, s) + _located([ast.Expr(value=call)], s)
        return out + self.loop_end(s, loop, ctx, defined)

    def for_(self, s, ctx, defined):
        n, loop, pre = self.loop_start(s, ctx, defined)
        inner = ctx.inside(loop)
        head = _located([ast.Assign(targets=[s.target], value=_name(f"itr{GEN}{n}"))], s)
        if loop.cnt:
            head += _located([_assign(loop.cnt, _const(False))], s)
        body = head + self.block(s.body, inner, set(defined) | set(assigned(head)))
        flags = self.stop_flags(s, loop, ctx)
        names = assigned(body)
        pre += self.bindings(names, defined, ctx, s)
        decl = self.declarations(names, ctx)
        defs = [_def(f"loop_body{GEN}{n}", [f"itr{GEN}{n}"], decl + body)]
        extra = _const(None)
        if flags:
            defs.append(_def(f"extra_test{GEN}{n}", [], [ast.Return(value=self.not_any(flags))]))
            extra = _name(f"extra_test{GEN}{n}")
        info = (s.lineno, first_lines(s.body + [s.target]), tuple(sorted(loop.appends)))
        call = _call(_ag("for_stmt"), self.expr(s.iter), extra, _name(f"loop_body{GEN}{n}"),
                     _name(f"get_state{GEN}{n}"), _name(f"set_state{GEN}{n}"), _const(tuple(names)), _const(info))
        out = pre + _located(defs, s) + self.state_functions(n, names, ctx, s) + _located([ast.Expr(value=call)], s)
        return out + self.loop_end(s, loop, ctx, defined)

    # ------------------------------------------------------------------ expressions
    def condition(self, e):
        """A condition: `==`/`!=` there go through ag__.eq/ne (refused on tensors)."""
        return self.expr(_Conditions().visit(e))

    def expr(self, e):
        return _Expressions(self).visit(e)


class _Conditions(ast.NodeTransformer):
    """`a == b` / `a != b` at the top of a condition (or under and/or/not) marked for ag__.eq/ne."""

    def visit_Compare(self, node):
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            fn = "eq" if isinstance(node.ops[0], ast.Eq) else "ne"
            return _located([ast.Call(func=_ag(fn), args=[node.left, node.comparators[0], _const(node.lineno)],
                                      keywords=[])], node)[0]
        return node

    def generic_visit(self, node):
        if isinstance(node, (ast.BoolOp, ast.UnaryOp)):
            return super().generic_visit(node)
        return node


_LEAVES = (ast.Name, ast.Constant, ast.expr_context, ast.operator, ast.cmpop, ast.unaryop, ast.boolop)


class _Expressions(ast.NodeTransformer):
    """The expressions of a statement rewritten (calls, conditional expressions, and/or/not,
    subscripts); a faster walk than NodeTransformer's (conversion cost, benchmarks/autograph.py)."""

    def __init__(self, conv):
        self.conv = conv

    def visit(self, node):
        if isinstance(node, _LEAVES):
            return node
        method = _VISITORS.get(type(node))
        return method(self, node) if method is not None else self.generic_visit(node)

    def generic_visit(self, node):
        for field in node._fields:
            old = getattr(node, field, None)
            if type(old) is list:
                if old and isinstance(old[0], ast.AST) or len(old) > 1:
                    new = [self.visit(v) if isinstance(v, ast.AST) else v for v in old]
                    old[:] = [v for v in new if v is not None]
            elif isinstance(old, ast.AST) and not isinstance(old, _LEAVES):
                setattr(node, field, self.visit(old))
        return node

    def visit_IfExp(self, node):
        node = self.generic_visit(node)
        test = _Conditions().visit(node.test)
        new = _call(_ag("if_exp"), self.visit(test) if test is not node.test else test,
                    _lambda(node.body), _lambda(node.orelse), _const(node.lineno))
        return _located([new], node)[0]

    def visit_BoolOp(self, node):
        node = self.generic_visit(node)
        fn = "and_" if isinstance(node.op, ast.And) else "or_"
        out = node.values[-1]
        for v in reversed(node.values[:-1]):
            out = _call(_ag(fn), v, _lambda(out))
        return _located([out], node)[0]

    def visit_UnaryOp(self, node):
        node = self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return _located([_call(_ag("not_"), node.operand)], node)[0]
        return node

    def visit_Call(self, node):
        node = self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Name) and f.id in _FRAME_CALLS:
            return node
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == AG:
            return node
        callee = _call(_ag("callee"), f)
        if "lineno" in f.__dict__:      # where f is: one run of the line table with it
            loc = f.lineno, f.col_offset, f.end_lineno, f.end_col_offset
            for n in (callee, callee.func, callee.func.value):
                n.lineno, n.col_offset, n.end_lineno, n.end_col_offset = loc
        return _located([ast.Call(func=callee, args=node.args, keywords=node.keywords)], node)[0]

    def visit_Subscript(self, node):
        """`t[i]` (a single index, read): ag__.getitem, which also takes a tensor index."""
        node = self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load) or isinstance(node.slice, (ast.Slice, ast.Tuple, ast.Constant)):
            return node
        return _located([_call(_ag("getitem"), node.value, node.slice)], node)[0]

    def visit_Lambda(self, node):
        return _located([ast.Lambda(args=self.conv.arguments(node.args), body=self.visit(node.body))], node)[0]

    def visit_FunctionDef(self, node):
        return node

    visit_ClassDef = visit_AsyncFunctionDef = visit_FunctionDef


_VISITORS = {getattr(ast, name[6:]): fn for name, fn in vars(_Expressions).items()
             if name.startswith("visit_") and hasattr(ast, name[6:])}
