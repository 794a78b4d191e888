"""The published JSON Schema of the graph format (docs/format.schema.json), compiled once."""
import json
import os

import jsonschema

PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "format.schema.json")
with open(PATH, encoding="utf-8") as _f:
    SCHEMA = json.load(_f)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def schema_errors(doc):
    """The schema's complaints about `doc`, as 'path: message' lines (empty when valid)."""
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:200]}"
            for e in sorted(VALIDATOR.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]


def assert_valid(doc, what="document"):
    problems = schema_errors(doc)
    assert not problems, f"{what} does not validate against docs/format.schema.json:\n" + "\n".join(problems[:10])
