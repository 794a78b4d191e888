"""docs/format.schema.json: a valid JSON Schema (draft 2020-12) that every written document
meets, versions 1 and 2, with and without backward functions, and that rejects what the
format forbids. (The op table's round trip, tests/test_ops_graph.py, validates every row.)"""
import copy
import json

import jsonschema
import numpy as np
import pytest

import defun as df
from schema_check import SCHEMA, assert_valid, schema_errors
from test_fuzz_documents import BASES
from serialize_helpers import as_version_1, stateful_control_flow_function, build_rich
from defun.graph.serialize import to_document


def test_the_schema_is_a_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("name", [name for name, _, _ in BASES])
def test_written_documents_validate(name):
    doc = next(d for n, d, _ in BASES if n == name)
    assert_valid(doc, name)
    assert_valid(json.loads(json.dumps(df.load_json(doc).to_document())), f"{name} written again")


def test_graph_built_documents_and_version_1_documents_validate():
    g, _, _ = build_rich()
    assert_valid(json.loads(json.dumps(to_document(g))), "the rich hand-built graph")
    f, _ = stateful_control_flow_function()
    doc = json.loads(json.dumps(df.export_json(f.get_concrete_function(df.constant([1.0, 2.0], df.float64)))))
    assert_valid(doc, "cond/while/call with effects")
    old = as_version_1(doc)
    assert {"stateful_call", "stateful_while"} <= {n["op"] for fd in old["functions"] for n in fd["nodes"]}
    assert_valid(old, "its version-1 form")


def test_documents_with_backward_functions_validate_to_any_depth():
    w = df.Variable(np.array([[1.0, -0.5], [0.25, 2.0]]))

    @df.defun
    def f(x):
        return df.reduce_sum(df.sin(x @ w)), df.gather(x, df.constant([1]))
    cf = f.get_concrete_function(df.constant(np.ones((2, 2))))
    for depth in (1, 2, 3):
        doc = json.loads(json.dumps(df.export_json(cf, include_backward=depth)))
        assert len(doc["gradients"]) == depth
        assert_valid(doc, f"backward depth {depth}")


def _doc():
    return copy.deepcopy(next(d for n, d, _ in BASES if n == "backward"))


@pytest.mark.parametrize("case, edit, where", [
    ("unknown top field", lambda d: d.update(extra=1), "(top)"),
    ("version 4", lambda d: d.update(version=4), "version"),
    ("site in version 2", lambda d: d.update(version=2), "functions/0/nodes/0"),
    ("site with a directory", lambda d: d["functions"][0]["nodes"][0].update(site=["a/b.py", 3]),
     "functions/0/nodes/0/site/0"),
    ("site with an escape", lambda d: d["functions"][0]["nodes"][0].update(site=["\x1b[2Jb.py", 3]),
     "functions/0/nodes/0/site/0"),
    ("site line 0", lambda d: d["functions"][0]["nodes"][0].update(site=["b.py", 0]), "functions/0/nodes/0/site/1"),
    ("site as text", lambda d: d["functions"][0]["nodes"][0].update(site="b.py:3"), "functions/0/nodes/0/site"),
    ("bad format", lambda d: d.update(format="other"), "format"),
    ("gradients in version 1", lambda d: d.update(version=1), "(top)"),
    ("bad name", lambda d: d["functions"][0].update(name="1abc"), "functions/0/name"),
    ("bad ref", lambda d: d["functions"][0]["nodes"][1].update(inputs=["a:0"]), "functions/0/nodes/1/inputs/0"),
    ("stateful false", lambda d: d["functions"][0]["nodes"][0].update(stateful=False), "functions/0/nodes/0/stateful"),
    ("twin op in version 2", lambda d: d["functions"][0]["nodes"][0].update(op="stateful_call"), "functions/0/nodes/0/op"),
    ("placeholder op", lambda d: d["functions"][0]["nodes"][0].update(op="placeholder"), "functions/0/nodes/0/op"),
    ("resource array", lambda d: d["variables"][0].update(dtype="resource"), "variables/0/dtype"),
    ("bad base64", lambda d: d["variables"][0].update(data="abc"), "variables/0/data"),
    ("negative size", lambda d: d["functions"][0]["inputs"][0].update(shape=[-1]), "functions/0/inputs/0/shape/0"),
    ("unknown structure", lambda d: d.update(output_structure={"set": []}), "output_structure"),
    ("bad feed", lambda d: d["gradients"][0]["feeds"].append({"other": 0}), "gradients/0/feeds/3"),
    ("record field missing", lambda d: d["gradients"][0].pop("seeds"), "gradients/0"),
])
def test_the_schema_rejects_what_the_format_forbids(case, edit, where):
    doc = _doc()
    edit(doc)
    problems = schema_errors(doc)
    assert problems and any(p.startswith(where) for p in problems), (case, problems)
    with pytest.raises(df.errors.GraphFormatError):     # the loader refuses them too
        df.load_json(doc)
