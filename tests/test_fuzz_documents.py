"""Fuzzing the loader: seeded structured mutations of exported documents.

Each mutation changes one to three places of a real exported document (a field dropped, a
value replaced by a hostile one, references swapped, lists cut or repeated, numbers and
strings nudged, array bytes rewritten, deep nesting, Python objects JSON cannot hold) and
the result is loaded, as a dict and as text, then run on the document's example inputs
within small budgets. Every outcome must be one of: refused with GraphFormatError, or
loaded and then ran, or ran into a typed error (df.errors: a kernel's InvalidArgumentError,
a ResourceExhaustedError of the budgets). The counts are printed.

CI runs FUZZ_MUTATIONS mutations (a fixed seed); DEFUN_FUZZ=N runs N of them (and
DEFUN_FUZZ_SEED picks another seed) for a deeper run:

    DEFUN_FUZZ=200000 python -m pytest tests/test_fuzz_documents.py -s
"""
import collections
import copy
import json
import os
import random

import numpy as np

import defun as df
from defun.graph.serialize import dumps_document, from_document
from serialize_helpers import leaves_of

FUZZ_MUTATIONS = 3000
F32 = np.float32
BUDGET = {"max_bytes": 64 << 20, "max_iterations": 2000}


def _bases():
    """(name, document, example inputs) of documents covering the format's parts."""
    v = df.Variable(np.array([[0.5, -1.0], [2.0, 0.25]], F32), name="v")
    u = df.Variable(np.arange(6, dtype=F32), name="u")
    offset = df.constant(np.array([0.5, -0.5], F32))

    @df.defun
    def inner(a):
        return df.reduce_sum(df.sigmoid(a) * 3.0, axis=0, keepdims=True)

    def model(x, k):
        h = df.matmul(x, v.read_value(), transpose_b=True) + offset
        s = inner(h)
        parts = df.split(h, 2, axis=1)
        z = df.concat([parts[1], s[:, :1]], axis=0) + df.cast(df.reshape(k, [1, 2]), df.float32)
        v.assign_sub(df.ones([2, 2]) * 0.125)
        return {"mean": df.reduce_mean(z, axis=1), "exp": df.exp(s)}

    def control(x):
        y = df.cond(df.reduce_sum(x) > 0.0, lambda: x * 2.0, lambda: -x)
        n, w = df.while_loop(lambda i, w: i < 4, lambda i, w: (i + 1, df.tanh(w) + 0.5), (0, y))
        u.scatter_add(df.IndexedSlices(w[:2] * 0.0 + 1.0, df.constant([1, 4]), (6,)))
        return w, n

    def arrays(x, i):
        p = df.pad(x, [[1, 2]], mode="REFLECT")
        t = df.tile(df.expand_dims(p, 0), [2, 1])
        srt = df.sort(t, axis=1, direction="DESCENDING")
        g = df.gather(srt, i, axis=1)
        e = df.einsum("ij,j->i", srt, p)
        seg = df.segment_sum(df.transpose(t), df.constant([0, 0, 1, 1, 2, 2, 2]))
        df.print("arrays", e, output_stream="stderr", summarize=2)
        return g, e, df.one_hot(i, 4, on_value=2.0), seg, df.range(0.0, 2.0, 0.5)

    def conv(img, kernel):
        y = df.conv2d(img, kernel, strides=1, padding="SAME")
        return df.max_pool2d(df.relu(y), 2, 2, "VALID"), df.reduce_max(y, axis=[1, 2])

    def loss(x):
        return df.reduce_sum(df.tanh(x @ v.read_value()) * x) + df.reduce_sum(df.softplus(x))

    rng = np.random.default_rng(0)
    cases = [
        ("model", model, [np.array([[1.0, 2.0], [-0.5, 0.75]], F32), np.array([3, -2], np.int32)], {}),
        ("control", control, [np.array([0.3, -0.1, 0.8], F32)], {}),
        ("arrays", arrays, [np.array([1.0, 3.0, 2.0, 5.0], F32), np.array([0, 3, 1], np.int32)], {}),
        ("conv", conv, [rng.normal(size=(1, 4, 4, 2)).astype(F32), rng.normal(size=(3, 3, 2, 3)).astype(F32)], {}),
        ("backward", loss, [np.array([[0.3, -0.2], [0.1, 0.4]], F32)], {"include_backward": 2}),
    ]
    out = []
    for name, fn, xs, kw in cases:
        cf = df.defun(fn).get_concrete_function(*[df.constant(x) for x in xs])
        doc = json.loads(json.dumps(df.export_json(cf, **kw)))
        out.append((name, doc, xs))
    return out


BASES = _bases()


def _locations(doc):
    """Every (container, key) in the document tree, in a fixed order."""
    out, stack = [], [doc]
    while stack:
        c = stack.pop()
        for k in (sorted(c) if isinstance(c, dict) else range(len(c))):
            out.append((c, k))
            if isinstance(c[k], (dict, list)):
                stack.append(c[k])
    return out


def _deep(depth, leaf):
    for _ in range(depth):
        leaf = [leaf]
    return leaf


class _Weird:
    """An object no JSON document holds; comparing or hashing it is fine, printing it is odd."""

    def __repr__(self):
        return "<weird " + "x" * 10_000 + ">"


HOSTILE = [None, True, False, 0, 1, -1, 2, 3, 7, 2 ** 28, 2 ** 31, -2 ** 31, 2 ** 63, 10 ** 30,
           0.5, -2.0, 1e308, "", "x", "0:0", "1:0", "3:1", "9:0", "99999:0", "float32", "float64",
           "int32", "int64", "bool", "resource", "object", "nan", "inf", "-inf", "...", "f", "f_grad",
           "inner", "v", "add", "call", "while", "const", "placeholder", "os.system", "SAME", "VALID",
           "REFLECT", "EMPTY", "WRAP", "stderr", "stdout", "ij,j->i", "->", "ASCENDING", "xy",
           [], [0], [-1], [None], [None, 2], [2 ** 28, 2 ** 28], ["0:0"], [[0, 1, 2]], {},
           {"output": 0}, {"output": 99}, {"none": True}, {"input": 0}, {"side": 0},
           {"dtype": "float32", "shape": [1], "data": "AAAAAA=="},
           {"dtype": "float32", "shape": [2 ** 27], "data": ""}]
ODD = [lambda: (1, 2), lambda: {1, 2}, lambda: b"bytes", lambda: np.int64(3), lambda: np.float32(0.5),
       lambda: float("nan"), lambda: float("inf"), lambda: _Weird(), lambda: _deep(5000, 0),
       lambda: {"a": _deep(3000, {})}, lambda: {1: "int key"}, lambda: {None: 1}]


def mutate(rng, doc):
    """1-3 structured mutations, in place; returns the kinds applied."""
    kinds = []
    for _ in range(rng.randint(1, 3)):
        locs = _locations(doc)
        if not locs:
            break
        c, k = locs[rng.randrange(len(locs))]
        value = c[k]
        kind = rng.choice(["drop", "replace", "replace", "odd", "swap", "number", "string", "repeat",
                           "cut", "data", "flip"])
        kinds.append(kind)
        if kind == "drop":
            if isinstance(c, dict):
                del c[k]
            else:
                c.pop(k)
        elif kind == "replace":
            c[k] = copy.deepcopy(rng.choice(HOSTILE))
        elif kind == "odd":
            c[k] = rng.choice(ODD)()
        elif kind == "swap":
            refs = [(c2, k2) for c2, k2 in locs if isinstance(c2[k2], str) and ":" in c2[k2]]
            if refs:
                c2, k2 = refs[rng.randrange(len(refs))]
                c[k], c2[k2] = c2[k2], value
        elif kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            c[k] = value + rng.choice([-2, -1, 1, 2, 0.5, 2 ** 31, -value - 1])
        elif kind == "string" and isinstance(value, str):
            c[k] = rng.choice([value[:-1], value + "x", value.upper(), value.lower(), value[::-1], value * 3])
        elif kind == "repeat" and isinstance(value, list) and value:
            value.append(value[rng.randrange(len(value))])     # the same object twice: fine
        elif kind == "cut" and isinstance(value, list) and value:
            del value[rng.randrange(len(value)):]
        elif kind == "flip" and isinstance(value, bool):
            c[k] = not value
        elif kind == "data":
            arrays = [c2[k2] for c2, k2 in locs if isinstance(c2[k2], dict) and isinstance(c2[k2].get("data"), str)]
            if arrays:
                a = arrays[rng.randrange(len(arrays))]
                n = len(a["data"]) * 3 // 4
                a["data"] = __import__("base64").b64encode(bytes(rng.randrange(256) for _ in range(n))).decode()
    return kinds


def run_one(doc, xs, outcomes, as_text):
    """Load (a dict, or its JSON text through a file-less parse) and run; count the outcome."""
    try:
        if as_text:
            try:
                text = json.dumps(doc)
            except (TypeError, ValueError, RecursionError):
                as_text = False   # odd Python objects: only a dict can hold them
            else:
                from defun.graph.serialize.validate import _parse_text
                doc = _parse_text(text)
        loaded = df.load_json(doc, **BUDGET)
    except df.errors.GraphFormatError:
        outcomes["refused"] += 1
        return
    try:
        with np.errstate(all="ignore"), _quiet_stderr():
            outs = loaded(*xs)
    except df.errors.ResourceExhaustedError:
        outcomes["loaded, stopped by a budget"] += 1
        return
    except (df.errors.InvalidArgumentError, df.errors.UnimplementedError):
        outcomes["loaded, a typed error when run"] += 1
        return
    for t in leaves_of(outs):
        assert isinstance(t, df.Tensor), f"a loaded function returned {type(t).__name__}"
    text = dumps_document(loaded.to_document())      # a loaded document exports and loads again
    assert dumps_document(from_document(json.loads(text)).to_document()) == text
    outcomes["loaded and ran"] += 1


class _quiet_stderr:
    """df.print writes to stderr (or stdout); mutated documents would fill the log."""

    def __enter__(self):
        import io
        import sys
        self.old = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()

    def __exit__(self, *exc):
        import sys
        sys.stdout, sys.stderr = self.old


def test_the_base_documents_load_and_run():
    for name, doc, xs in BASES:
        outcomes = collections.Counter()
        run_one(copy.deepcopy(doc), xs, outcomes, as_text=True)
        assert outcomes == {"loaded and ran": 1}, (name, outcomes)


def test_mutated_documents_are_refused_or_load_and_run_cleanly():
    n = int(os.environ.get("DEFUN_FUZZ", FUZZ_MUTATIONS))
    seed = int(os.environ.get("DEFUN_FUZZ_SEED", 7))
    rng = random.Random(seed)
    texts = [(name, json.dumps(doc), xs) for name, doc, xs in BASES]
    outcomes, kinds = collections.Counter(), collections.Counter()
    for i in range(n):
        name, text, xs = texts[i % len(texts)]
        doc = json.loads(text)
        kinds.update(mutate(rng, doc))
        try:
            run_one(doc, xs, outcomes, as_text=(i % 3 == 0))
        except Exception as e:
            raise AssertionError(f"mutation {i} of {name!r} (DEFUN_FUZZ_SEED={seed}): "
                                 f"{type(e).__name__}: {e}") from e
    summary = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
    print(f"\nfuzz: {n} mutations of {len(BASES)} documents: {summary}")
    print(f"fuzz: mutation kinds: {', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}")
    assert sum(outcomes.values()) == n
    assert outcomes["refused"] and outcomes["loaded and ran"]     # both kinds of outcome are reached


def test_arbitrary_values_and_bytes_are_refused(tmp_path):
    """Not documents at all: random JSON values as dicts, random bytes as files."""
    rng = random.Random(11)
    outcomes = collections.Counter()
    path = tmp_path / "f.json"
    for i in range(300):
        value = rng.choice([rng.choice(HOSTILE), rng.choice(ODD)(), {"format": "defun.graph", "version": 2},
                            {"format": "defun.graph", "version": 2, "entry": "f", "functions": rng.choice(HOSTILE),
                             "variables": [], "output_structure": {"none": True}}])
        if not isinstance(value, str):
            try:
                df.load_json(value)
            except df.errors.GraphFormatError:
                outcomes["dict refused"] += 1
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
        try:
            text = json.dumps(value, default=str).encode()
        except (ValueError, RecursionError):
            text = b"[]"
        path.write_bytes(rng.choice([data, b"[" * 100_000, b'{"a":' * 50_000, text]))
        try:
            df.load_json(str(path))
        except df.errors.GraphFormatError:
            outcomes["file refused"] += 1
    print(f"\nfuzz: 300 arbitrary values and files: {dict(outcomes)}")
    assert outcomes["file refused"] == 300
