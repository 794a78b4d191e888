"""The `defun` command: look at, check, run, draw, convert, time and profile graph documents.

    defun show model.json                    the graph, one line per node (--optimized, --plan,
                                             --variables, --backward; --json for scripts)
    defun validate model.json                it loads; its inputs, outputs and size
    defun run model.json x=x.npy -o out.npz  run it on .npy (or f.npz[key]) inputs named as its
                                             arguments, or --random ones; outputs by name
    defun dot model.json -o model.svg        draw it: .svg or .png (Graphviz), or .dot text
    defun view model.json                    its forward and backward as a page in the browser
                                             (groups that open and close; --profile: time per node)
    defun onnx model.json -o model.onnx      convert it to ONNX (the [onnx] extra); --check
                                             compares onnxruntime with the loaded function
    defun numpy model.json -o model.py       a Python module computing it with numpy alone
    defun bench model.json --size 64         median and p90 call time on random inputs
                                             (--profile: the time per node)

Also `python -m defun ...`. Exit status 0 on success; 2 when a file or an argument is bad
(a document that does not load prints its GraphFormatError, a bad flag or a budget
exceeded one line, all without a traceback); 1 when the function itself fails, a check
fails or a needed tool is missing. Nothing given on the command line is evaluated as Python:
inputs are read with np.load(allow_pickle=False).
The module is long because it holds every command's arguments and checks; reading and
writing the arrays, and showing names safely, are defun/cli_files.py's.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import defun
from defun.runtime import errors
from defun.graph.backends import backends, get_backend
from defun.graph.printer import format_graph, render_dot, to_dot
from defun.graph.serialize import budget
from defun.graph_function import GraphFunction
from defun.export import load_json
from defun.profile import _duration, profile
from defun.cli_files import (BadInput, Visible, array_type, file_stem, member_name, one_line, parse_feeds,
                             random_inputs, read_input, safe_names, shown, silence, type_text, write_npz)

__all__ = ["main"]


class _Failed(Exception):
    """The command could not do its work (exit status 1)."""


def main(argv=None):
    """Run the command line `argv` (default sys.argv[1:]); returns the exit status.

    Everything it prints shows control, format (bidi) and lone surrogate characters as
    escapes (`\\x1b`, `\\u202e`): names come from documents anyone may have written. A reader
    that stops early (`defun show F.json | head`) ends it quietly, with status 141 as a
    program stopped by SIGPIPE."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Visible(out), Visible(err)
    try:
        code = _main(argv)
        out.flush()     # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        silence(out)
        return 141
    finally:
        sys.stdout, sys.stderr = out, err


def _main(argv):
    parser = _parser()
    args = parser.parse_args(argv)
    where = f"defun {args.command}"
    try:
        args.handler(args)
    except errors.GraphFormatError as e:
        print(f"{where}: {args.file}: {e}", file=sys.stderr)
        return 2
    except errors.ResourceExhaustedError as e:
        print(f"{where}: {one_line(e)} (raise the budget with --max-bytes N, --max-iterations N or "
              f"--max-operations N, or `none` for a document you trust)", file=sys.stderr)
        return 2
    except BadInput as e:
        print(f"{where}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise
    except OSError as e:
        print(f"{where}: {e.filename or args.file}: {e.strerror or e}", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"{where}: out of memory", file=sys.stderr)
        return 1
    except (_Failed, errors.DefunError) as e:
        print(f"{where}: {one_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{where}: interrupted", file=sys.stderr)
        return 130
    return 0


# ---------------------------------------------------------------------------------------
# The commands

def _show(args):
    f = _load(args)
    if args.json:
        print(json.dumps(_description(f), indent=2))
        return
    print(_signature_text(f))
    if args.variables:
        print(_variables_text(f))
    if args.plan:
        print(f.plan_source(args.backend), end="")
        return
    print(format_graph(f.optimized_graph() if args.optimized else f.graph, sites=args.sites))
    if args.backward:
        bw = GraphFunction.of(f.graph).backward()
        print()
        print(f"# backward: inputs are the gradients of outputs {list(bw.grad_outputs)}, then "
              f"{len(bw.capture_sources)} saved values ({len(bw.side_outputs)} side outputs)")
        print(format_graph(bw.graph, sites=args.sites))


def _validate(args):
    f = _load(args)
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
    f = _load(args)
    if args.size is not None and not args.random:
        raise BadInput("--size sets the unknown sizes of --random inputs: add --random")
    feeds = parse_feeds(args.inputs)
    arrays = _gather_inputs(f, feeds, args)
    try:
        result = f(*arrays)
    except errors.ResourceExhaustedError:
        raise
    except errors.DefunError as e:
        raise _Failed(f"the function failed: {e}") from None
    named = dict(zip(f.output_names, (np.asarray(t) for t in _flat_results(f, result))))
    written = _written_to(args, named)
    if written is not None:
        print(f"wrote {len(named)} output{'s' if len(named) != 1 else ''} to {written}")
        return
    with np.printoptions(threshold=200, edgeitems=3):
        for k, v in named.items():
            print(f"{shown(k)}: {array_type(v)}")
            print(v)


def _written_to(args, named):
    """Write the outputs to -o's .npz or to --outdir's files: what to print after "wrote N
    outputs to" (None when neither is given). A name that is not safe as a file or member
    name (`../x`, a control character) is written under a safe one, printed beside it."""
    if args.output:
        if not args.output.endswith(".npz"):
            raise BadInput(f"-o {args.output}: outputs are written as .npz (name it out.npz)")
        keys = safe_names(named, member_name)
        write_npz(args.output, {keys[k]: v for k, v in named.items()})
        return f"{args.output}: " + ", ".join(
            f"{shown(k)} {array_type(v)}" + (f" (as key {shown(keys[k])})" if keys[k] != k else "")
            for k, v in named.items())
    if args.outdir:
        if os.path.exists(args.outdir) and not os.path.isdir(args.outdir):
            raise BadInput(f"--outdir {args.outdir}: exists and is not a directory")
        os.makedirs(args.outdir, exist_ok=True)
        files = {k: f"{stem}.npy" for k, stem in safe_names(named, file_stem).items()}
        for name, value in named.items():
            np.save(os.path.join(args.outdir, files[name]), value, allow_pickle=False)
        return f"{args.outdir}: " + ", ".join(f"{files[k]} {array_type(v)}" for k, v in named.items())
    return None


def _dot(args):
    f = _load(args)
    ext = os.path.splitext(args.output)[1].lower().lstrip(".")
    if ext not in ("dot", "gv", "svg", "png", "pdf"):
        raise BadInput(f"-o {args.output}: name the picture .svg, .png or .pdf (drawn by Graphviz) "
                        f"or .dot (the text)")
    backward = GraphFunction.of(f.graph).backward() if args.backward else None
    text = to_dot(f.graph, backward, input_names=[s.name for s in f.signature],
                  output_names=f.output_names)
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


def _view(args):
    from defun.view import measure_side_outputs, view    # the page's module, only for this command
    f = _load(args)
    output = args.output or os.path.splitext(os.path.basename(args.file))[0] + ".html"
    if not output.lower().endswith((".html", ".htm")):
        raise BadInput(f"-o {output}: the page is HTML: name it .html")
    rows = saved = None
    if args.profile:
        arrays = random_inputs(f.signature, args.size, args.seed, args.int_high)
        rows = profile(f, *arrays, repeat=args.repeat)
        saved = None if args.no_backward else measure_side_outputs(f, *arrays)
    page = view(f, path=output, backward=not args.no_backward, profile=rows, side_outputs=saved,
                browser=not args.no_open)
    print(f"wrote {output} ({len(page.html.encode('utf-8'))} bytes)" + ("" if args.no_open else "; opened it"))


def _onnx(args):
    f = _load(args)
    from defun.graph.onnx_export import MIN_OPSET  # lazily: `defun --version` need not load the export
    try:
        import onnx    # the optional [onnx] extra
    except ImportError as e:
        raise _Failed(f"ONNX export needs the onnx package: pip install 'defun[onnx]' ({e})") from None
    if not MIN_OPSET <= args.opset <= onnx.defs.onnx_opset_version():
        raise BadInput(f"--opset {args.opset}: this export writes opsets {MIN_OPSET} to "
                        f"{onnx.defs.onnx_opset_version()} (the installed onnx's newest)")
    model = defun.export_onnx(f, None, opset=args.opset)
    data = model.SerializeToString()
    with open(args.output, "wb") as out:
        out.write(data)
    print(f"wrote {args.output} ({len(data)} bytes; inputs {', '.join(i.name for i in model.graph.input)}; "
          f"outputs {', '.join(o.name for o in model.graph.output)})")
    if args.check:
        _check_onnx(f, data, args)


def _check_onnx(f, data, args):
    try:
        import onnxruntime    # the optional [onnx] extra
    except ImportError:
        raise _Failed("--check runs the model in onnxruntime: pip install onnxruntime") from None
    arrays = random_inputs(f.signature, args.size, args.seed, 1)
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: a for i, a in zip(session.get_inputs(), arrays)})
    want = [np.asarray(t) for t in _flat_results(f, f(*arrays))]
    worst, failed = (0.0, None), []
    for name, a, b in zip(f.output_names, got, want):
        diff, tolerance = _difference(a, b)
        if diff > worst[0] or worst[1] is None:
            worst = (diff, name)
        if diff > tolerance:
            failed.append(f"{shown(name)} (difference {diff:.3g}, tolerance {tolerance:.3g})")
    on = ", ".join(f"{shown(s.name)} {array_type(a)}" for s, a in zip(f.signature, arrays)) or "no inputs"
    print(f"checked against onnxruntime {onnxruntime.__version__} on random {on}: largest "
          f"difference {worst[0]:.3g}" + (f" (output {shown(worst[1])})" if worst[1] is not None else ""))
    if failed:
        raise _Failed(f"onnxruntime differs beyond float tolerance in {', '.join(failed)}")


def _difference(a, b):
    """(the largest difference of `a` from `b`, relative to b's size past 1; its tolerance)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return float("inf"), 0.0
    if b.dtype.kind not in "fc":
        return float(np.count_nonzero(a != b)), 0.0
    both_nan = np.isnan(a) & np.isnan(b)
    scale = np.maximum(1.0, np.abs(b.astype(np.float64)))
    diff = np.where(both_nan, 0.0, np.abs(a.astype(np.float64) - b) / scale)
    return (float(np.max(diff)) if diff.size else 0.0), _TOLERANCE[b.dtype.itemsize]


_TOLERANCE = {2: 1e-2, 4: 1e-4, 8: 1e-9}     # by itemsize: float16, float32, float64


def _numpy(args):
    from defun.numpy_export import export_numpy_source  # lazily: `defun --version` need not load it
    f = _load(args)
    text = export_numpy_source(f, args.output, include_backward=args.backward)
    if args.output:
        print(f"wrote {args.output} ({len(text.splitlines())} lines; needs only numpy)")
    else:
        sys.stdout.write(text)


def _bench(args):
    f = _load(args)
    arrays = random_inputs(f.signature, args.size, args.seed, args.int_high)
    try:
        for _ in range(args.warmup):
            f(*arrays)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            f(*arrays)
            times.append(time.perf_counter() - start)
        rows = profile(f, *arrays, repeat=args.repeat) if args.profile else None
    except errors.ResourceExhaustedError:
        raise
    except errors.DefunError as e:
        raise _Failed(f"the function failed on random inputs: {e}") from None
    times.sort()
    p90 = times[min(len(times) - 1, int(round(0.9 * (len(times) - 1))))]
    on = ", ".join(f"{shown(s.name)} {array_type(a)}" for s, a in zip(f.signature, arrays)) or "no inputs"
    print(f"@{f.graph.name} on {on}")
    print(f"median {_duration(statistics.median(times))}, p90 {_duration(p90)}, "
          f"min {_duration(times[0])} over {len(times)} calls ({args.warmup} warm-up)")
    if rows is not None:
        print()
        print(rows)
        nodes, call = rows.total_seconds / args.repeat, statistics.median(times)
        print(f"# per call: the nodes' median times add up to {_duration(nodes)} of the {_duration(call)} "
              f"median call ({100 * nodes / call:.0f}%); the rest runs the plan between them")


# ---------------------------------------------------------------------------------------
# Helpers

def _load(args):
    path = args.file
    if os.path.isdir(path):
        raise BadInput(f"{path} is a directory; give a graph document (.json)")
    # `show --plan --backend B` names the plan shown: the function loads on numpy
    backend = getattr(args, "backend", None) if args.command in ("run", "bench") else None
    try:
        return load_json(path, backend=backend or "numpy",
                         max_bytes=getattr(args, "max_bytes", budget.DEFAULT_MAX_BYTES),
                         max_iterations=getattr(args, "max_iterations", budget.DEFAULT_MAX_ITERATIONS),
                         max_operations=getattr(args, "max_operations", budget.DEFAULT_MAX_OPERATIONS))
    except errors.GraphFormatError:
        raise
    except ValueError as e:     # the loader's arguments: a backend that cannot keep the budgets
        if "meter" not in str(e):
            raise BadInput(one_line(e)) from None
        raise BadInput(f"--backend {backend} runs compiled loops that the budgets cannot meter: add "
                        f"--max-bytes none --max-iterations none --max-operations none to run a "
                        f"document you trust on it") from None


def _flat_results(f, result):
    """The results of a call of loaded function `f`, in its output order."""
    out = [None] * len(f.graph.outputs)

    def walk(s, r):
        (kind, value), = s.items()
        if kind == "output":
            out[value] = r
        elif kind in ("list", "tuple"):
            for v, x in zip(value, r):
                walk(v, x)
        elif kind == "dict":
            for k, v in value:
                walk(v, r[k])
        elif kind == "namedtuple":
            for (_, v), x in zip(value["fields"], r):
                walk(v, x)
    walk(f.output_structure, result)
    return out


def _signature_text(f):
    ins = ", ".join(f"{shown(s.name)}: {type_text(s.shape, s.dtype.name)}" for s in f.signature)
    outs = ", ".join(f"{shown(n)}: {type_text(t.shape, t.dtype.name)}"
                     for n, t in zip(f.output_names, f.graph.outputs))
    return f"# @{f.graph.name}({ins}) -> ({outs})"


def _variables_text(f):
    values = f.variables
    if not values:
        return "# variables: none"
    lines = [f"# variables ({len(values)}, {sum(v.nbytes for v in values.values())} bytes):"]
    lines += [f"#   {shown(name)}: {array_type(v)}" for name, v in values.items()]
    return "\n".join(lines)


def _description(f):
    """What `show --json` prints: the names, dtypes and shapes (null: any size) of the
    inputs, outputs and variables."""
    def entry(name, shape, dtype):
        return {"name": name, "dtype": dtype, "shape": [None if d is None else int(d) for d in shape]}
    return {"function": f.graph.name,
            "inputs": [entry(s.name, s.shape, s.dtype.name) for s in f.signature],
            "outputs": [entry(n, t.shape, t.dtype.name) for n, t in zip(f.output_names, f.graph.outputs)],
            "variables": [entry(n, v.shape, v.dtype.name) for n, v in f.variables.items()],
            "backward_levels": f.backward_depth}


def _gather_inputs(f, feeds, args):
    names = [s.name for s in f.signature]
    extra = sorted(set(feeds) - set(names))
    missing = [n for n in names if n not in feeds]
    listing = ", ".join(f"{s.name} ({type_text(s.shape, s.dtype.name)})" for s in f.signature) or "none"
    if extra:
        raise BadInput(f"no input named {', '.join(map(repr, extra))}; the function's inputs are "
                        f"{listing}")
    if missing and not args.random:
        raise BadInput(f"missing input{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(map(repr, missing))}: pass NAME=file.npy for each of {listing} "
                        f"(or --random for random values)")
    drawn = iter(random_inputs([s for s in f.signature if s.name not in feeds],
                               4 if args.size is None else args.size, args.seed, args.int_high))
    arrays = []
    for s in f.signature:
        if s.name not in feeds:
            arrays.append(next(drawn))
            continue
        path, a = read_input(s.name, feeds[s.name])
        want = type_text(s.shape, s.dtype.name)
        if a.dtype != s.dtype.np and a.dtype.newbyteorder("=") == s.dtype.np:
            a = a.astype(s.dtype.np)        # saved big-endian: the same values
        if a.dtype != s.dtype.np:
            raise BadInput(f"input {s.name!r}: {path} holds {array_type(a)}, the function takes "
                            f"{want}; convert it with .astype(np.{s.dtype.name})")
        if a.ndim != len(s.shape) or any(d is not None and d != n for d, n in zip(s.shape, a.shape)):
            raise BadInput(f"input {s.name!r}: {path} holds {array_type(a)}, the function takes "
                            f"{want} (? is any size)")
        arrays.append(a)
    return arrays


# ---------------------------------------------------------------------------------------
# The command line: every flag value checked by argparse, every refusal one line

class _Parser(argparse.ArgumentParser):
    """argparse, with a bad command line as one line on stderr (exit 2) instead of usage."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def _int_at_least(low):
    def parse(text):
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value
    return parse


def _budget(text):
    if text.lower() == "none":
        return None
    return _int_at_least(0)(text)


def _backend(text):
    try:
        return get_backend(text).name
    except ValueError as e:
        raise argparse.ArgumentTypeError(one_line(e)) from None


def _parser():
    parser = _Parser(
        prog="defun", description="Look at, check, run, draw, convert, time and profile defun "
        "graph documents (written by df.export_json).",
        epilog="Exit status: 0 success; 2 a bad file, argument or exceeded budget; 1 the function "
        "failed, a check failed or a needed tool is missing.")
    parser.add_argument("--version", action="version", version=f"defun {defun.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name, handler, help_, description):
        p = sub.add_parser(name, help=help_, description=description)
        p.add_argument("file", help="a graph document (JSON, from df.export_json)")
        p.set_defaults(handler=handler)
        return p

    backend_help = f"a backend: {', '.join(backends())} (installed here; default numpy)"
    _looking_commands(command, backend_help)
    _run_command(command, backend_help)
    _converting_commands(command)
    _bench_command(command, backend_help)
    _view_command(command)
    return parser


def _looking_commands(command, backend_help):
    """`defun show` and `defun validate`."""
    p = command("show", _show, "print the graph, one line per node",
                "Print the function's signature (inputs and outputs by name) and its graph as "
                "text: one line per node, called functions after their caller.")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--optimized", action="store_true",
                       help="the graph after the optimization passes (what plans compile)")
    which.add_argument("--plan", action="store_true", help="the compiled plan's Python source")
    p.add_argument("--backend", type=_backend, default="numpy", help="the plan's backend: " + backend_help)
    p.add_argument("--variables", action="store_true", help="list the variables: name, dtype, shape")
    p.add_argument("--sites", action="store_true",
                   help="end each node's line with its source line (# file.py:line), as the document keeps it")
    p.add_argument("--backward", action="store_true",
                   help="also print the backward function the graph's gradient runs")
    p.add_argument("--json", action="store_true",
                   help="print names, dtypes and shapes of inputs, outputs and variables as JSON")
    command("validate", _validate, "check that the document loads; print its inputs and outputs",
            "Load and verify the document (every check the loader makes) and report its "
            "signature, functions, nodes and variables.")


def _run_command(command, backend_help):
    """`defun run`: inputs, outputs, random inputs, backend and budgets."""
    p = command("run", _run, "run the function on .npy inputs",
                "Run the function on inputs saved with np.save (NAME=file.npy) or np.savez "
                "(NAME=file.npz[key]), one per argument (the names `defun show` prints), or on "
                "random ones (--random). Outputs, by name, are printed or written to an .npz "
                "(-o) or to one .npy each (--outdir). Nothing given is evaluated as Python.")
    p.add_argument("inputs", nargs="*", metavar="NAME=file.npy", help="one input per argument")
    out = p.add_mutually_exclusive_group()
    out.add_argument("-o", "--output", help="write the outputs to this .npz file")
    out.add_argument("--outdir", help="write each output to DIR/NAME.npy (DIR made if missing)")
    p.add_argument("--random", action="store_true", help="random values for the inputs not given")
    p.add_argument("--size", type=_int_at_least(0), help="the size of unknown (?) dimensions of "
                   "random inputs (default 4)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the random inputs")
    p.add_argument("--int-high", type=_int_at_least(1), default=1,
                   help="random integer inputs are drawn from [0, N) (default 1: zeros)")
    _budget_flags(p, backend_help)


def _budget_flags(p, backend_help):
    """--backend and the budgets of `run` and `bench` (the loader's)."""
    p.add_argument("--backend", type=_backend, default="numpy", help=backend_help)
    p.add_argument("--max-bytes", type=_budget, default=budget.DEFAULT_MAX_BYTES, metavar="N",
                   help=f"most bytes of values a call may hold (default {budget.DEFAULT_MAX_BYTES}; none: no limit)")
    p.add_argument("--max-iterations", type=_budget, default=budget.DEFAULT_MAX_ITERATIONS, metavar="N",
                   help=f"most iterations of a loop (default {budget.DEFAULT_MAX_ITERATIONS}; none: no limit)")
    p.add_argument("--max-operations", type=_budget, default=budget.DEFAULT_MAX_OPERATIONS, metavar="N",
                   help=f"most operations of a call, across its calls and loops (default "
                        f"{budget.DEFAULT_MAX_OPERATIONS}; none: no limit)")


def _converting_commands(command):
    """`defun dot`, `defun onnx` and `defun numpy`: the graph drawn or written in another form."""
    p = command("dot", _dot, "draw the graph (SVG, PNG or DOT)",
                "Draw the graph with Graphviz: a box per node (op and shape; attributes in the "
                "tooltip), inputs and outputs by name, captured variables and constants dashed, "
                "cond branches and while bodies as clusters; with --backward the forward and "
                "backward functions side by side, the side outputs the backward reads filled and "
                "joined to it. .svg/.png/.pdf need the graphviz package ([viz] extra) and "
                "Graphviz's dot program; .dot writes the text.")
    p.add_argument("-o", "--output", required=True, help="g.svg, g.png, g.pdf or g.dot")
    p.add_argument("--backward", action="store_true", help="draw the backward function too")
    p = command("onnx", _onnx, "convert to an ONNX model",
                "Convert the function to an ONNX model (variables as initializers, inputs and "
                "outputs by name); needs the [onnx] extra. --check runs it in onnxruntime on "
                "random inputs beside the loaded function and prints the largest difference "
                "(exit 1 beyond float tolerance).")
    p.add_argument("-o", "--output", required=True, help="where to write the .onnx model")
    p.add_argument("--opset", type=_int_at_least(1), default=17, help="ONNX opset version (default 17)")
    p.add_argument("--check", action="store_true", help="compare onnxruntime with the loaded function")
    p.add_argument("--size", type=_int_at_least(0), default=4,
                   help="the size of unknown (?) dimensions of --check's inputs (default 4)")
    p.add_argument("--seed", type=int, default=0, help="random seed of --check's inputs")
    p = command("numpy", _numpy, "write a Python module that needs only numpy",
                "Write the function as one Python module that imports only numpy: forward(...) "
                "returns its outputs (named in OUTPUT_NAMES); with --backward also "
                "forward_with_side_outputs and backward. Printed when -o is not given.")
    p.add_argument("-o", "--output", help="where to write the module (.py)")
    p.add_argument("--backward", action="store_true", help="include the backward function")


def _view_command(command):
    """`defun view`."""
    p = command("view", _view, "show the graph as a page in the browser",
                "Write the forward and backward graphs as one self-contained HTML page (no "
                "network needed) and open it in the browser: groups for called functions, cond "
                "branches, loop bodies, forward and backward open and close; a node shows its op, "
                "shape, dtype, attributes and source line; side outputs and the backward inputs "
                "reading them are marked; --profile lays the time per node over it.")
    p.add_argument("-o", "--output", help="where to write the page (default: the document's name .html, here)")
    p.add_argument("--no-open", action="store_true", help="write the page without opening it")
    p.add_argument("--no-backward", action="store_true", help="the forward graph alone")
    p.add_argument("--profile", action="store_true", help="profile --repeat calls on random inputs first, and "
                   "measure the side outputs' bytes on them")
    p.add_argument("--size", type=_int_at_least(0), default=32,
                   help="the size of unknown (?) dimensions of --profile's inputs (default 32)")
    p.add_argument("--repeat", type=_int_at_least(1), default=10, help="--profile's calls (default 10)")
    p.add_argument("--int-high", type=_int_at_least(1), default=1,
                   help="integer inputs are drawn from [0, N) (default 1: zeros, valid indices)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the inputs")


def _bench_command(command, backend_help):
    """`defun bench`."""
    p = command("bench", _bench, "time calls on random inputs",
                "Time calls of the loaded function on random inputs of its signature and print "
                "the median, p90 and minimum; --profile adds the time per node.")
    p.add_argument("--size", type=_int_at_least(0), default=32,
                   help="the size of unknown (?) dimensions (default 32)")
    p.add_argument("--repeat", type=_int_at_least(1), default=100, help="timed calls (default 100)")
    p.add_argument("--warmup", type=_int_at_least(0), default=3, help="untimed calls first (default 3)")
    p.add_argument("--int-high", type=_int_at_least(1), default=1,
                   help="integer inputs are drawn from [0, N) (default 1: zeros, valid indices)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the inputs")
    p.add_argument("--profile", action="store_true",
                   help="also profile --repeat calls: time, calls and share per node (df.profile)")
    _budget_flags(p, backend_help)
