"""`df.export_json` / `df.load_json`: a traced function as a versioned JSON document."""
from graph.ir import SymbolicTensor
from defun.function import ConcreteFunction, Function
from runtime.variables import SymbolicVariable
from graph.serialize import describe_structure, from_document, to_document, write_document
from runtime.nest import flatten

__all__ = ["export_json", "load_json"]


def _input_names(concrete):
    """A name per argument placeholder: the parameter name, with a path for nested leaves."""
    args, kwargs = concrete._arg_structure
    fn = concrete._function.python_function if concrete._function is not None else None
    try:
        import inspect
        params = list(inspect.signature(fn).parameters) if fn is not None else []
    except (TypeError, ValueError):
        params = []
    def is_input(x):
        return isinstance(x, (SymbolicTensor, SymbolicVariable))

    names = []
    for i, a in enumerate(args):
        base = params[i] if i < len(params) else f"arg{i}"
        leaves = [x for x in flatten(a) if is_input(x)]
        names += [base] if len(leaves) == 1 and is_input(a) else \
            [f"{base}_{k}" for k in range(len(leaves))]
    for k in sorted(kwargs):
        leaves = [x for x in flatten(kwargs[k]) if is_input(x)]
        names += [k] if len(leaves) == 1 and is_input(kwargs[k]) else \
            [f"{k}_{j}" for j in range(len(leaves))]
    if len(names) != len(concrete.graph.inputs):
        names = [f"arg{i}" for i in range(len(concrete.graph.inputs))]
    return names


def export_json(concrete_function, path=None):
    """The graph of `concrete_function` as a JSON-ready dict; also written to `path` if given.

    Variables are frozen at their current value; the same function gives the same bytes.

    >>> cf = predict.get_concrete_function(df.TensorSpec([None, 64], df.float32))
    >>> df.export_json(cf, "predict.json")
    """
    if isinstance(concrete_function, Function):
        raise TypeError("export_json takes a ConcreteFunction: call f.get_concrete_function(*example_args) "
                        "(or with df.TensorSpec arguments) and export that")
    if not isinstance(concrete_function, ConcreteFunction):
        raise TypeError(f"export_json expects a ConcreteFunction, got {type(concrete_function).__name__}")
    cf = concrete_function
    names = _input_names(cf)
    for name, t in zip(names, cf.graph.inputs):
        if t.dtype.name == "resource":
            raise TypeError(f"export_json: argument {name!r} of {cf.name} is a variable; an exported "
                            f"function takes tensors only. Use the variable from the enclosing scope "
                            f"instead of passing it (captured variables export their current value)")
    out_index = [k if type(k) is int else None for k in cf._out_index]  # None, Variable: no output
    structure = describe_structure(cf._out_structure, out_index)
    doc = to_document(cf.graph, structure, names)
    if path is not None:
        write_document(doc, path)
    return doc


def load_json(path_or_dict):
    """A callable running an exported graph on numpy arrays or tensors (no Python code needed).

    >>> predict = df.load_json("predict.json")
    >>> predict(np.ones((2, 64), np.float32))
    """
    return from_document(path_or_dict)
