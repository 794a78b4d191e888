"""The `defun` command: look at, check, run, draw, convert and time graph documents.

    defun show model.json                    the graph, one line per node (--backward too)
    defun validate model.json                it loads; its inputs, outputs and size
    defun run model.json x=x.npy -o out.npz  run it on .npy inputs, named as its arguments
    defun dot model.json -o model.svg        draw it: .svg or .png (Graphviz), or .dot text
    defun onnx model.json -o model.onnx      convert it to ONNX (the [onnx] extra)
    defun numpy model.json -o model.py       a Python module computing it with numpy alone
    defun bench model.json --size 64         median and p90 call time on random inputs

Also `python -m defun ...`. Exit status 0 on success; 2 when a file or an argument is bad
(a document that does not load prints its GraphFormatError, without a traceback); 1 when
the function itself fails or a needed tool is missing.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import defun
from defun.runtime import errors
from defun.runtime.nest import flatten
from defun.graph.printer import format_graph, render_dot, to_dot
from defun.graph.serialize import from_document
from defun.graph_function import GraphFunction
from defun.numpy_export import export_numpy_source

__all__ = ["main"]


class _BadInput(Exception):
    """A file or argument the user gave is wrong (exit status 2)."""


class _Failed(Exception):
    """The command could not do its work (exit status 1)."""


def main(argv=None):
    """Run the command line `argv` (default sys.argv[1:]); returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    where = f"defun {args.command}"
    try:
        args.handler(args)
    except errors.GraphFormatError as e:
        print(f"{where}: {args.file}: {e}", file=sys.stderr)
        return 2
    except _BadInput as e:
        print(f"{where}: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{where}: {e.filename or args.file}: {e.strerror or e}", file=sys.stderr)
        return 2
    except (_Failed, errors.DefunError) as e:
        print(f"{where}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{where}: interrupted", file=sys.stderr)
        return 130
    return 0


# ---------------------------------------------------------------------------------------
# The commands

def _show(args):
    f = _load(args.file)
    print(_signature_text(f))
    print(format_graph(f.graph))
    if args.backward:
        bw = GraphFunction.of(f.graph).backward()
        print()
        print(f"# backward: inputs are the gradients of outputs {list(bw.grad_outputs)}, then "
              f"{len(bw.capture_sources)} saved values ({len(bw.side_outputs)} side outputs)")
        print(format_graph(bw.graph))


def _validate(args):
    f = _load(args.file)
    doc = f.to_document()
    nodes = sum(len(fn.get("nodes", ())) for fn in doc["functions"])
    variables = f.variables
    n_fn = len(doc["functions"])
    print(f"{args.file}: valid ({doc['format']} version {doc['version']})")
    print(_signature_text(f))
    print(f"{n_fn} function{'s' if n_fn != 1 else ''}, {nodes} nodes, {len(variables)} "
          f"variable{'s' if len(variables) != 1 else ''} "
          f"({sum(v.nbytes for v in variables.values())} bytes)")


def _run(args):
    f = _load(args.file)
    feeds = _parse_feeds(args.inputs)
    arrays = _gather_inputs(f, feeds)
    try:
        result = f(*arrays)
    except errors.DefunError as e:
        raise _Failed(f"the function failed: {e}") from None
    outputs = [np.asarray(t) for t in flatten(result)] if result is not None else []
    named = {f"output_{k}": v for k, v in enumerate(outputs)}
    if args.output:
        if not args.output.endswith(".npz"):
            raise _BadInput(f"-o {args.output}: outputs are written as .npz (name it out.npz)")
        np.savez(args.output, **named)
        print(f"wrote {len(named)} output{'s' if len(named) != 1 else ''} to {args.output}: "
              + ", ".join(f"{k} {_array_type(v)}" for k, v in named.items()))
        return
    with np.printoptions(threshold=200, edgeitems=3):
        for k, v in named.items():
            print(f"{k}: {_array_type(v)}")
            print(v)


def _dot(args):
    f = _load(args.file)
    ext = os.path.splitext(args.output)[1].lower().lstrip(".")
    if ext not in ("dot", "gv", "svg", "png", "pdf"):
        raise _BadInput(f"-o {args.output}: name the picture .svg, .png or .pdf (drawn by Graphviz) "
                        f"or .dot (the text)")
    backward = GraphFunction.of(f.graph).backward() if args.backward else None
    text = to_dot(f.graph, backward)
    if ext in ("dot", "gv"):
        data = text.encode("utf-8")
    else:
        try:
            data = render_dot(text, ext)
        except RuntimeError as e:
            raise _Failed(str(e)) from None
    with open(args.output, "wb") as out:
        out.write(data)
    print(f"wrote {args.output} ({len(data)} bytes)")


def _onnx(args):
    f = _load(args.file)
    export_onnx = getattr(defun, "export_onnx", None)
    if export_onnx is None:
        raise _Failed("this installation of defun has no ONNX export (df.export_onnx)")
    try:
        export_onnx(f, args.output, opset=args.opset)
    except ImportError as e:
        raise _Failed(f"ONNX export needs the onnx package: pip install 'defun[onnx]' ({e})") from None
    print(f"wrote {args.output} ({os.path.getsize(args.output)} bytes)")


def _numpy(args):
    f = _load(args.file)
    text = export_numpy_source(f, args.output, include_backward=args.backward)
    if args.output:
        print(f"wrote {args.output} ({len(text.splitlines())} lines; needs only numpy)")
    else:
        sys.stdout.write(text)


def _bench(args):
    f = _load(args.file)
    if args.size < 0 or args.repeat < 1 or args.warmup < 0:
        raise _BadInput("--size and --warmup must be >= 0 and --repeat >= 1")
    rng = np.random.default_rng(args.seed)
    arrays = []
    for s in f.signature:
        shape = tuple(args.size if d is None else d for d in s.shape)
        arrays.append(_random_input(rng, shape, s.dtype.np, args.int_high))
    try:
        for _ in range(args.warmup):
            f(*arrays)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            f(*arrays)
            times.append(time.perf_counter() - start)
    except errors.DefunError as e:
        raise _Failed(f"the function failed on random inputs: {e}") from None
    times.sort()
    p90 = times[min(len(times) - 1, int(round(0.9 * (len(times) - 1))))]
    on = ", ".join(f"{s.name} {_array_type(a)}" for s, a in zip(f.signature, arrays)) or "no inputs"
    print(f"@{f.graph.name} on {on}")
    print(f"median {_duration(statistics.median(times))}, p90 {_duration(p90)}, "
          f"min {_duration(times[0])} over {len(times)} calls ({args.warmup} warm-up)")


# ---------------------------------------------------------------------------------------
# Helpers

def _load(path):
    if os.path.isdir(path):
        raise _BadInput(f"{path} is a directory; give a graph document (.json)")
    return from_document(path)


def _type_text(shape, dtype):
    return f"{dtype}[{', '.join('?' if d is None else str(d) for d in shape)}]"


def _array_type(a):
    return _type_text(a.shape, a.dtype.name)


def _signature_text(f):
    ins = ", ".join(f"{s.name}: {_type_text(s.shape, s.dtype.name)}" for s in f.signature)
    outs = ", ".join(_type_text(t.shape, t.dtype.name) for t in f.graph.outputs)
    return f"# @{f.graph.name}({ins}) -> ({outs})"


def _parse_feeds(items):
    feeds = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise _BadInput(f"inputs are given as NAME=file.npy, got {item!r}")
        if name in feeds:
            raise _BadInput(f"input {name!r} is given twice")
        feeds[name] = path
    return feeds


def _gather_inputs(f, feeds):
    names = [s.name for s in f.signature]
    extra = sorted(set(feeds) - set(names))
    missing = [n for n in names if n not in feeds]
    listing = ", ".join(f"{s.name} ({_type_text(s.shape, s.dtype.name)})" for s in f.signature) or "none"
    if extra:
        raise _BadInput(f"no input named {', '.join(map(repr, extra))}; the function's inputs are "
                        f"{listing}")
    if missing:
        raise _BadInput(f"missing input{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(map(repr, missing))}: pass NAME=file.npy for each of {listing}")
    arrays = []
    for s in f.signature:
        path = feeds[s.name]
        try:
            a = np.load(path, allow_pickle=False)
        except OSError:
            raise
        except ValueError as e:
            raise _BadInput(f"input {s.name!r}: {path} is not a .npy array file ({e})") from None
        if not isinstance(a, np.ndarray):
            raise _BadInput(f"input {s.name!r}: {path} holds several arrays (an .npz); save one "
                            f"array with np.save")
        want = _type_text(s.shape, s.dtype.name)
        if a.dtype != s.dtype.np:
            raise _BadInput(f"input {s.name!r}: {path} holds {_array_type(a)}, the function takes "
                            f"{want}; convert it with .astype(np.{s.dtype.name})")
        if a.ndim != len(s.shape) or any(d is not None and d != n for d, n in zip(s.shape, a.shape)):
            raise _BadInput(f"input {s.name!r}: {path} holds {_array_type(a)}, the function takes "
                            f"{want} (? is any size)")
        arrays.append(a)
    return arrays


def _random_input(rng, shape, dtype, int_high):
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, max(int_high, 1), size=shape).astype(dtype)


def _duration(seconds):
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds:.3f} s"


def _parser():
    parser = argparse.ArgumentParser(
        prog="defun", description="Look at, check, run, draw, convert and time defun graph "
        "documents (written by df.export_json).",
        epilog="Exit status: 0 success; 2 a bad file or argument; 1 the function failed or a "
        "needed tool is missing.")
    parser.add_argument("--version", action="version", version=f"defun {defun.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name, handler, help_, description):
        p = sub.add_parser(name, help=help_, description=description)
        p.add_argument("file", help="a graph document (JSON, from df.export_json)")
        p.set_defaults(handler=handler)
        return p

    p = command("show", _show, "print the graph, one line per node",
                "Print the function's signature and its graph as text: one line per node, "
                "called functions after their caller.")
    p.add_argument("--backward", action="store_true",
                   help="also print the backward function the graph's gradient runs")
    command("validate", _validate, "check that the document loads; print its inputs and outputs",
            "Load and verify the document (every check the loader makes) and report its "
            "signature, functions, nodes and variables.")
    p = command("run", _run, "run the function on .npy inputs",
                "Run the function on inputs saved with np.save, one NAME=file.npy per argument "
                "(the names `defun show` prints). Outputs are printed, or written to an .npz "
                "as output_0, output_1, ...")
    p.add_argument("inputs", nargs="*", metavar="NAME=file.npy", help="one input per argument")
    p.add_argument("-o", "--output", help="write the outputs to this .npz file")
    p = command("dot", _dot, "draw the graph (SVG, PNG or DOT)",
                "Draw the graph with Graphviz: captured variables and constants are dashed; with "
                "--backward the forward and backward functions are drawn side by side, the side "
                "outputs the backward reads filled and joined to it. .svg/.png/.pdf need the "
                "graphviz package ([viz] extra) and Graphviz's dot program; .dot writes the text.")
    p.add_argument("-o", "--output", required=True, help="g.svg, g.png, g.pdf or g.dot")
    p.add_argument("--backward", action="store_true", help="draw the backward function too")
    p = command("onnx", _onnx, "convert to an ONNX model",
                "Convert the function to an ONNX model (variables as initializers); needs the "
                "[onnx] extra.")
    p.add_argument("-o", "--output", required=True, help="where to write the .onnx model")
    p.add_argument("--opset", type=int, default=17, help="ONNX opset version (default 17)")
    p = command("numpy", _numpy, "write a Python module that needs only numpy",
                "Write the function as one Python module that imports only numpy: forward(...) "
                "returns its outputs; with --backward also forward_with_side_outputs and "
                "backward. Printed when -o is not given.")
    p.add_argument("-o", "--output", help="where to write the module (.py)")
    p.add_argument("--backward", action="store_true", help="include the backward function")
    p = command("bench", _bench, "time calls on random inputs",
                "Time calls of the loaded function on random inputs of its signature and print "
                "the median, p90 and minimum.")
    p.add_argument("--size", type=int, default=32, help="the size of unknown (?) dimensions (default 32)")
    p.add_argument("--repeat", type=int, default=100, help="timed calls (default 100)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls first (default 3)")
    p.add_argument("--int-high", type=int, default=1,
                   help="integer inputs are drawn from [0, N) (default 1: zeros, valid indices)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the inputs")
    return parser
