"""The op table, gathered: every family's rows (tests/op_rows_core.py first, then the other
tests/op_rows_*.py in name order), their exclusions and (nd) names, and the helpers the
table-driven test modules share (items per row variant, graph-test dtypes and signatures)."""
import importlib
import pathlib

import numpy as np
import pytest

import defun as df

ROWS = []
EXCLUDED = {}   # ops the tables do not run: op name -> why, and where it is tested instead
API_ND = set()  # ops API.md marks (nd): their rows must say grad=False and the registry must agree


def _gather_families():
    """Rows, exclusions and (nd) names of the op families in tests/op_rows_*.py."""
    paths = sorted(pathlib.Path(__file__).parent.glob("op_rows_*.py"))
    for stem in ["op_rows_core"] + [p.stem for p in paths if p.stem != "op_rows_core"]:
        family = importlib.import_module(stem)
        ROWS.extend(family.ROWS)
        EXCLUDED.update(getattr(family, "EXCLUDED", {}))
        API_ND.update(getattr(family, "API_ND", ()))


_gather_families()
ROW_BY_OP = {r.op: r for r in ROWS}


def op_cases(predicate=lambda row, v: True):
    """One pytest item per row variant (`op-k`) the predicate keeps: an item loops over the
    variant's dtypes or sizes itself (each item costs CI time), naming the configuration when
    one fails."""
    return [pytest.param(row, v, id=f"{row.op}-{k}") for row in ROWS for k, v in enumerate(row.variants)
            if predicate(row, v)]


def float_inputs(v):
    """Positions of the variant's floating-point inputs (the ones a gradient is taken of)."""
    return [i for i, a in enumerate(v.args) if a.is_float_input]


def graph_rows(row, v):
    """Whether the row runs in the graph tests."""
    return row.op not in ("custom_gradient",)  # its Python gradient is tested eagerly


def graph_dtype(row, v):
    """The dtype a graph test runs the variant in: float64 where it is differentiated."""
    return df.float64 if row.grad is True and v.grad and float_inputs(v) else row.dtypes_of(v)[0]


def input_signature_of(xs, unknown):
    """TensorSpecs of arrays `xs`: their shapes, or every size unknown (None)."""
    return [df.TensorSpec([None] * np.ndim(x) if unknown else np.shape(x), df.as_dtype(np.asarray(x).dtype))
            for x in xs]


# Ops that refuse (with a message saying what to pass) when sizes they need are unknown
# while tracing: squeeze(axis=None) cannot know the result rank, unstack needs num=.
REFUSES_UNKNOWN = {"squeeze", "unstack"}


def documented_refusal(row, exc, unknown):
    """Whether `exc` is the row's specified refusal of unknown sizes (REFUSES_UNKNOWN)."""
    return (unknown and row.op in REFUSES_UNKNOWN and isinstance(exc, df.errors.InvalidArgumentError)
            and "unknown" in str(exc) and row.op in str(exc))
