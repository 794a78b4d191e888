"""The API index and the docs site: docs/api.md is what docs/gen_api.py writes from the
package now (one line per public name, its docstring's first sentence), every public name
has a docstring whose first sentence is a real sentence, and `mkdocs build --strict` (the
guide, the format, the architecture, the index and the reference made by mkdocstrings)
passes with no warning. The [docs] extra, part of the [test] extra, installs mkdocs."""
import importlib.util
import os
import re
import subprocess
import sys
import types

import pytest

import defun as df

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "docs", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_api = _load("gen_api")


def test_the_api_index_is_current():
    with open(gen_api.INDEX, encoding="utf-8") as f:
        written = f.read()
    assert written == gen_api.index_markdown(), "docs/api.md is out of date: run python docs/gen_api.py"


def test_the_index_has_one_line_per_public_name():
    with open(gen_api.INDEX, encoding="utf-8") as f:
        listed = re.findall(r"^- `(df[\w.]*)`: (.+)$", f.read(), re.M)
    names = [name for name, _ in listed]
    assert len(names) == len(set(names))
    expected = {f"df.{n}" for n in dir(df)}
    for space in [n for n in dir(df) if isinstance(getattr(df, n), types.ModuleType)]:
        module = getattr(df, space)
        own = getattr(module, "__all__", None) or [
            n for n in dir(module) if not n.startswith("_") and not isinstance(getattr(module, n), types.ModuleType)]
        expected |= {f"df.{space}.{n}" for n in own}
    assert set(names) == expected
    # the names TensorFlow users reach for, and the namespaces, are there with their summaries
    summaries = dict(listed)
    for name in ("df.defun", "df.GradientTape", "df.nn.softmax", "df.math.lgamma", "df.linalg.solve",
                 "df.errors.TracingError", "df.nn", "df.float32", "df.dask.SCATTER_BYTES"):
        assert gen_api.sentence_problem(summaries[name]) is None, (name, summaries[name])
    assert summaries["df.math.xlogy"] == "x * log(y), and 0 where x is 0 (TF's rule)."


def test_every_public_name_has_a_docstring_that_starts_with_a_sentence():
    problems = []
    for space, name, obj in gen_api.public_names():
        problem = gen_api.sentence_problem(gen_api.first_sentence(gen_api.docstring(space, name, obj)))
        if problem:
            problems.append(f"{gen_api.qualified(space, name)}: {problem}")
    assert not problems, "\n".join(problems)


def test_the_sentence_checks_can_fail():
    first, problem = gen_api.first_sentence, gen_api.sentence_problem
    assert first("Sum over `axis`: `df.f(1., 2.)`. More here.\n\nDetails.") == "Sum over `axis`: `df.f(1., 2.)`."
    assert first("Split it, e.g. in two. Then") == "Split it, e.g. in two."
    assert first("A long first\n    sentence on two lines.") == "A long first sentence on two lines."
    assert problem("") == "no docstring"
    assert "period" in problem("Elementwise tanh")
    assert "one word" in problem("Tanh.")
    assert "signature" in problem("f(x) -> y.")
    assert problem("exp(x) - 1, accurate near 0: `df.expm1(1e-10) -> 1e-10`.") is None
    # a constant's docstring is the string after its assignment; a builtin's own doc is none
    assert gen_api.docstring("dask", "SCATTER_BYTES", df.dask.SCATTER_BYTES).startswith("A document longer")
    fake = types.ModuleType("fake")
    assert gen_api.attribute_docstring(fake, "X") is None
    rows = [("", "tanh", df.tanh), ("", "LIMIT", 7), ("nn", "tanh", df.tanh)]
    text = gen_api.index_markdown(rows)
    assert "- `df.tanh`: Elementwise tanh(x).\n" in text and "- `df.LIMIT`: \n" in text
    assert "## `df.nn`" in text and "- `df.nn.tanh`: Elementwise tanh(x)." in text


def test_the_reference_shows_each_object_once_and_links_the_rest():
    rows = [("", "tanh", df.tanh), ("", "float32", df.float32), ("nn", "tanh", df.tanh),
            ("", "nn", df.nn)]
    pages = gen_api.reference_pages(rows)
    assert sorted(pages) == ["reference/df.md", "reference/nn.md"]
    assert "::: defun.tanh\n" in pages["reference/df.md"]
    assert "df.float32 = df.float32" in pages["reference/df.md"]           # a value: shown, not inspected
    assert "[`df.nn`](../reference/nn.md)" in pages["reference/df.md"]
    assert "::: defun.nn.tanh" not in pages["reference/nn.md"]
    assert "The same object as [`df.tanh`](../reference/df.md#defun.tanh)." in pages["reference/nn.md"]


def test_doctests_in_docstrings_are_fenced_as_code():
    pytest.importorskip("griffe")
    fence = _load("griffe_public").fence_doctests
    text = "Max of each window.\n\n>>> df.f(x)\n[[ 5.,  7.]]\n\nMore.\n>>> g()"
    assert fence(text) == ("Max of each window.\n\n```pycon\n>>> df.f(x)\n[[ 5.,  7.]]\n```\n\nMore.\n"
                           "```pycon\n>>> g()\n```")
    assert fence("No examples.") == "No examples."


def _mkdocs(tmp_path, config="mkdocs.yml", cwd=ROOT):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                           "-d", str(site)], cwd=cwd, capture_output=True, text=True, timeout=600)
    return done, site


def test_the_docs_site_builds_with_warnings_as_errors(tmp_path):
    done, site = _mkdocs(tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "WARNING" not in output, output[-4000:]
    for page in ("guide", "format", "architecture", "api"):
        assert (site / page / "index.html").is_file(), page
    spaces = [n for n in dir(df) if isinstance(getattr(df, n), types.ModuleType)]
    for space in ["df"] + spaces:
        assert (site / "reference" / space / "index.html").is_file(), space
    reference = (site / "reference" / "df" / "index.html").read_text(encoding="utf-8")
    # mkdocstrings rendered the docstrings and signatures under the public names
    assert 'id="defun.matmul"' in reference and "transpose_a" in reference
    assert "Matrix product of 2-D or batched inputs" in reference
    index = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert 'href="../reference/nn/#defun.nn.softmax"' in index


def test_a_broken_anchor_fails_the_strict_build(tmp_path):
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        ours = yaml.safe_load(f)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the part](other.md#no-such-part).\n", encoding="utf-8")
    (docs / "other.md").write_text("# Other\n\n## A part\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    config.write_text(yaml.safe_dump({"site_name": "t", "validation": ours["validation"]}), encoding="utf-8")
    done, _ = _mkdocs(tmp_path, config, cwd=tmp_path)
    assert done.returncode != 0 and "no-such-part" in done.stdout + done.stderr
