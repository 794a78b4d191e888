"""A plan's code object written from its lines without compile() (CPython 3.11 only).

compile() of a plan's source costs ~7 us a line on a chain, most of it parsing: each name
an argument goes through some twenty grammar rules. The executor's lines have a few
forms (`v3 = k3(v1, c2)`, `k3(v1, c2, v1)`, `v5_0, v5_1 = k5(v4, axis=t5_0)`, `del v1, v4`)
inside one fixed frame (`def plan(a0, ...): try: ... return (...) except Exception as _e:
_fail(_e); raise`), whose bytecode is written here directly, a few bytes a line: the same
bytes, names, constants, stack size and exception table compile() makes of that source
(tests/test_plan_code.py compares them), and two location tables: the source's lines, and
the user's (given per source line, as graph/executor.py's `_user_line_table` makes them).

`assemble` returns None for anything else (a line of another form, no outputs, another
Python): the executor then compiles the source.
"""
import dis
import functools
import re
import sys

from defun.runtime import sites

__all__ = ["assemble"]

_SUPPORTED = sys.version_info[:2] == (3, 11)    # the bytecode written here is 3.11's
_OP = dis.opmap
_EXTENDED_ARG = dis.EXTENDED_ARG
# inline cache entries after each opcode (3.11's dis keeps the table private)
_CACHES = getattr(dis, "_inline_cache_entries", None) if _SUPPORTED else None

# One body line: `del names` or `[targets = ]callee(arguments)`, each argument a name or
# `keyword=name` (a check's tuples, an undo log's attribute, ... are other forms).
_LINE = re.compile(r"^ {8}(?:del ([\w, ]+)|(?:([\w, ]+?) = )?(\w+)\(([\w=, ]*)\))$", re.M)


class _Unsupported(Exception):
    """A line this module does not write: the source is compiled instead."""


_STACK_GUIDE = 30     # compile()'s STACK_USE_GUIDELINE: past it, calls and tuples build a list


@functools.lru_cache(maxsize=8192)
def _instruction(op, arg=0):
    """Opcode `op` with argument `arg` (EXTENDED_ARG prefixes as needed) and its caches."""
    out = []
    for shift in (24, 16, 8):
        if arg >> shift:
            out += [_EXTENDED_ARG, (arg >> shift) & 255]
    out += [op, arg & 255] + [0, 0] * _CACHES[op]
    return bytes(out)


if _SUPPORTED and _CACHES is not None:
    _POP_TOP = _instruction(_OP["POP_TOP"])
    _CALLS = [_instruction(_OP["PRECALL"], n) + _instruction(_OP["CALL"], n) for n in range(_STACK_GUIDE + 1)]
    # more values than compile() puts on the stack: a list appended to, then a tuple
    _LIST, _APPEND = _instruction(_OP["BUILD_LIST"]), _instruction(_OP["LIST_APPEND"], 1)
    _AS_TUPLE, _CALL_EX = _instruction(_OP["LIST_TO_TUPLE"]), _instruction(_OP["CALL_FUNCTION_EX"])


def assemble(lines, n_inputs, ret, source_name, filename, user_lines):
    """(code running the plan with the user's lines, the same code with the source's lines),
    or None. `lines`: the body's lines (8 spaces in); `ret`: the output names; the source is
    `def plan(a0, ...):`, `try:`, the lines, `return (...)`, the handler (line 1 the def);
    `source_name`: the source's file name; `user_lines[g - 1]`: the user's line of source
    line g in `filename` (None: keep the source's lines)."""
    if not _SUPPORTED or _CACHES is None or not ret:
        return None
    rows = _LINE.findall("\n".join(lines))
    if len(rows) != len(lines):
        return None
    try:
        return _Writer(n_inputs).code(rows, ret, (source_name, filename), user_lines)
    except _Unsupported:
        return None


class _Writer:
    """One plan's code: names, constants and the bytes loading and storing each name."""

    def __init__(self, n_inputs):
        self.names = {}         # global name -> index in co_names (order of first use)
        self.varnames = {f"a{i}": i for i in range(n_inputs)}     # local -> index
        self.consts = {None: 0}     # co_consts: the docstring's place (None), keyword tuples
        self.n_inputs = n_inputs
        self.loads = {}         # name -> the bytes loading it
        self.callees = {}       # name -> the bytes loading it to be called (NULL + global)
        self.stores = {}        # name -> the bytes storing it
        self.depth = 4          # the handler's stack depth

    # ------------------------------------------------------------------ names
    def _global(self, name):
        gi = self.names.get(name)
        if gi is None:
            gi = self.names[name] = len(self.names)
        return gi

    def _local(self, name):
        """The index of local `name` (assigned or deleted here), never read before as a global."""
        li = self.varnames.get(name)
        if li is None:
            if name in self.names:
                raise _Unsupported(name)
            li = self.varnames[name] = len(self.varnames)
        return li

    def _store(self, name):
        code = self.stores.get(name)
        if code is None:
            code = self.stores[name] = _instruction(_OP["STORE_FAST"], self._local(name))
        return code

    def _load(self, name):
        code = self.loads.get(name)
        if code is None:
            li = self.varnames.get(name)
            code = self.loads[name] = _instruction(_OP["LOAD_FAST"], li) if li is not None else \
                _instruction(_OP["LOAD_GLOBAL"], self._global(name) << 1)
        return code

    # ------------------------------------------------------------------ lines
    def _call(self, targets, callee, args):
        """The bytes of line `[targets = ]callee(args)`."""
        out = [self.callees.get(callee) or self._callee(callee)]
        loads = self.loads
        keywords = ()
        args = args.split(", ") if args else ()
        for a in args:
            if "=" in a:
                k, a = a.split("=")
                keywords += (k,)
            elif keywords:
                raise _Unsupported(a)
            out.append(loads.get(a) or self._load(a))
        n = len(args)
        if n + len(keywords) > _STACK_GUIDE:     # (compile() counts a keyword twice)
            if keywords:
                raise _Unsupported(callee)
            out[1:] = [_LIST] + [b + _APPEND for b in out[1:]] + [_AS_TUPLE, _CALL_EX]
        else:
            if keywords:
                k = self.consts.get(keywords)
                if k is None:
                    k = self.consts[keywords] = len(self.consts)
                out.append(_instruction(_OP["KW_NAMES"], k))
            out.append(_CALLS[n])
            if n > self.depth - 2:
                self.depth = n + 2
        if not targets:
            out.append(_POP_TOP)
        elif "," in targets:
            names = targets.rstrip(",").split(", ")
            out.append(_instruction(_OP["UNPACK_SEQUENCE"], len(names)))
            out += [self._store(t) for t in names]
            self.depth = max(self.depth, len(names))
        else:
            out.append(self.stores.get(targets) or self._store(targets))
        return b"".join(out)

    def _callee(self, name):
        if name in self.varnames:
            raise _Unsupported(name)
        code = self.callees[name] = _instruction(_OP["LOAD_GLOBAL"], self._global(name) << 1 | 1)
        return code

    def code(self, rows, ret, files, user_lines):
        body = [_instruction(_OP["RESUME"]), _instruction(_OP["NOP"])]
        units, lines = [1, 1], [1, 2]        # per group of instructions: code units, source line
        call = self._call
        for deleted, targets, callee, args in rows:
            if deleted:
                line = b"".join([_instruction(_OP["DELETE_FAST"], self._local(d)) for d in deleted.split(", ")])
            else:
                line = call(targets, callee, args)
            body.append(line)
            units.append(len(line) >> 1)
        lines += range(3, len(rows) + 3)
        end = len(rows) + 3             # the return's line; the handler's follow
        if len(ret) > _STACK_GUIDE:
            returned = [_LIST] + [self._load(r) + _APPEND for r in ret] + [_AS_TUPLE]
        else:
            returned = [self._load(r) for r in ret] + [_instruction(_OP["BUILD_TUPLE"], len(ret))]
        self.depth = max(self.depth, len(ret) if len(ret) <= _STACK_GUIDE else 2)   # a list and a value
        body += returned
        units.append(sum(len(b) for b in returned) // 2 + 1)
        lines.append(end)
        body.append(_instruction(_OP["RETURN_VALUE"]))
        code = b"".join(body)
        handler, h_units, h_lines, table = self._handler(len(code) // 2, end)
        code += handler
        units += h_units
        lines += h_lines
        return self._code_objects(code, units, lines, table, files, user_lines)

    def _handler(self, at, end):
        """`except Exception as _e: _fail(_e); raise` from code unit `at` on (the body's
        return at line `end`): its bytes, groups, and the whole exception table."""
        match = _instruction(_OP["LOAD_GLOBAL"], self._global("Exception") << 1) + \
            _instruction(_OP["CHECK_EXC_MATCH"])
        call = _instruction(_OP["LOAD_GLOBAL"], self._global("_fail") << 1 | 1)
        e = self._local("_e")
        store = _instruction(_OP["STORE_FAST"], e)
        call += self._load("_e") + _instruction(_OP["PRECALL"], 1) + _instruction(_OP["CALL"], 1) + \
            _instruction(_OP["POP_TOP"])
        cleanup = _instruction(_OP["LOAD_CONST"], 0) + store + _instruction(_OP["DELETE_FAST"], e) + \
            _instruction(_OP["RERAISE"], 1)
        reraise = _instruction(_OP["RERAISE"], 0)
        jump = len(store + call + _instruction(_OP["RAISE_VARARGS"], 0) + cleanup) // 2
        match += _instruction(_OP["POP_JUMP_FORWARD_IF_FALSE"], jump)
        parts = [_instruction(_OP["PUSH_EXC_INFO"]), match + store, call,
                 _instruction(_OP["RAISE_VARARGS"], 0), cleanup, reraise,
                 _instruction(_OP["COPY"], 3) + _instruction(_OP["POP_EXCEPT"]) + _instruction(_OP["RERAISE"], 1)]
        units = [len(p) // 2 for p in parts]
        lines = [None, end + 1, end + 2, end + 3, None, end + 1, None]
        h0 = at
        h1 = h0 + units[0] + units[1]            # the call of _fail
        h2 = h1 + units[2] + units[3]            # the clean-up of _e
        h4 = h2 + units[4] + units[5]            # COPY, POP_EXCEPT, RERAISE
        table = _exception_table([(2, at - 1, h0, 0, False), (h0, h1, h4, 1, True),
                                  (h1, h2, h2, 1, True), (h2, h4, h4, 1, True)])
        return b"".join(parts), units, lines, table

    def _code_objects(self, code, units, lines, table, files, user_lines):
        names = tuple(self.names)
        varnames = tuple(self.varnames)
        consts = tuple(self.consts)
        source = sites.location_table(units, lines, 1)
        generated = _TEMPLATE.replace(
            co_argcount=self.n_inputs, co_nlocals=len(varnames), co_stacksize=self.depth, co_code=code,
            co_consts=consts, co_names=names, co_varnames=varnames, co_linetable=source,
            co_exceptiontable=table, co_firstlineno=1, co_filename=files[0])
        if user_lines is None:
            return generated, generated
        user = [None if g is None else user_lines[g - 1] for g in lines]
        return generated.replace(co_filename=files[1], co_firstlineno=user_lines[0],
                                 co_linetable=sites.location_table(units, user, user_lines[0])), generated


def _exception_table(entries):
    """3.11's exception table of (start, end, target, depth, lasti) in code units."""
    out = bytearray()
    for start, end, target, depth, lasti in entries:
        for k, value in enumerate((start, end - start, target, depth << 1 | lasti)):
            chunks = []
            while True:
                chunks.append(value & 63)
                value >>= 6
                if not value:
                    break
            chunks.reverse()
            for j, c in enumerate(chunks):
                out.append(c | (64 if j < len(chunks) - 1 else 0) | (128 if k == 0 and j == 0 else 0))
    return bytes(out)


_TEMPLATE = compile("def plan(): pass", "<defun plan>", "exec").co_consts[0] if _SUPPORTED else None
