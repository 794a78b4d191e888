"""Every ```python and ```console block of docs/*.md runs, and prints what the doc says.

Rules (so the docs cannot rot):
- The python blocks of one file run in order, in one namespace, in a fresh interpreter
  whose working directory is a temporary directory (files the examples write land there).
  A fresh interpreter keeps names such as `loss_0` (in reprs and messages) deterministic.
- A ```text block that directly follows a python block (only blank lines between) is the
  block's expected stdout. Whitespace is normalized (runs of spaces and newlines compare
  equal); `[...]` in the expected text matches anything.
- Each block is compiled as the file `example.py` (its own line numbers), so error messages
  that point at user code read `example.py:3: ...` whatever the block's place in the doc.
- A ```console block is shell commands, each a line `$ command`, the lines after it (up to
  the next `$`) what it prints, stdout and stderr together, matched as above. They run in
  their turn among the python blocks, in the same directory, with `sh`; the `defun` command
  is this checkout's console script. A command must exit 0 (`; echo $?` shows a status).
"""
import json
import os
import re
import subprocess
import sys
from functools import lru_cache

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")

_FENCE = re.compile(r"^```([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


def extract_blocks(text, kinds=("python", "console")):
    """[(line, source, expected or None, kind)] for the python and console blocks of a
    markdown text (a console block's expected output is in its source)."""
    fences = []
    for m in _FENCE.finditer(text):
        fences.append((m.group(1), m.group(2), m.start(), m.end(), text.count("\n", 0, m.start()) + 1))
    blocks = []
    for k, (lang, body, start, end, line) in enumerate(fences):
        if lang not in kinds:
            continue
        expected = None
        if lang == "python" and k + 1 < len(fences):
            nlang, nbody, nstart, _, _ = fences[k + 1]
            if nlang == "text" and text[end:nstart].strip() == "":
                expected = nbody
        blocks.append((line, body, expected, lang))
    return blocks


def console_commands(source):
    """[(command, expected output)] of a console block: each `$ ` line and the lines after it."""
    commands = []
    for row in source.splitlines():
        if row.startswith("$ "):
            commands.append([row[2:], []])
        elif commands:
            commands[-1][1].append(row)
        elif row.strip():
            raise ValueError(f"a console block starts with `$ command`, not {row!r}")
    return [(command, "\n".join(lines)) for command, lines in commands]


def _doc_files():
    if not os.path.isdir(DOCS):
        return []
    return sorted(f for f in os.listdir(DOCS) if f.endswith(".md"))


def _cases():
    cases = []
    for name in _doc_files():
        with open(os.path.join(DOCS, name), encoding="utf-8") as f:
            blocks = extract_blocks(f.read())
        for index, (line, _, _, _) in enumerate(blocks):
            cases.append(pytest.param(name, index, id=f"{name}:{line}"))
    return cases


# Runs in the child interpreter: executes the blocks, reports each block's stdout or error
# (a console block: each command's output).
_RUNNER = r"""
import contextlib, importlib, io, json, linecache, subprocess, sys, traceback, warnings
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("default")
blocks = json.loads(sys.stdin.read())
namespace = {"__name__": "__main__"}
results = []
failed = None


def run_console(commands):
    outputs = []
    for command in commands:
        proc = subprocess.run(command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=600)
        outputs.append(proc.stdout)
        if proc.returncode != 0:
            return {"ok": False, "error": f"$ {command}: exit status {proc.returncode}:\n{proc.stdout}",
                    "stdout": outputs}
    return {"ok": True, "stdout": outputs}


for kind, source in blocks:
    if failed is not None:
        results.append({"ok": False, "error": "not run: an earlier block failed", "stdout": ""})
        continue
    if kind == "console":
        results.append(run_console(source))
        failed = None if results[-1]["ok"] else results[-1]["error"]
        continue
    linecache.cache["example.py"] = (len(source), None, source.splitlines(True), "example.py")
    importlib.invalidate_caches()   # a block may import a module an earlier one wrote
    out = io.StringIO()
    try:
        code = compile(source, "example.py", "exec")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            exec(code, namespace)
        results.append({"ok": True, "stdout": out.getvalue()})
    except BaseException:
        failed = traceback.format_exc()
        results.append({"ok": False, "error": failed, "stdout": out.getvalue()})
print(json.dumps(results))
"""


SCRIPTS = os.path.dirname(sys.executable)     # where the install put the `defun` command


def _environment(console):
    """The examples' environment: fixed hashing; for console blocks this checkout's `defun`
    command, its output unbuffered (stdout and stderr keep their order)."""
    if console and not os.path.exists(os.path.join(SCRIPTS, "defun.exe" if os.name == "nt" else "defun")):
        pytest.fail(f"the `defun` console script is not installed next to {sys.executable}; "
                    f"install the package first: pip install -e .")
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONHASHSEED="0", PYTHONUNBUFFERED="1",
                PATH=SCRIPTS + os.pathsep + os.environ.get("PATH", ""),
                PYTHONPATH=ROOT + (os.pathsep + path if path else ""))


@lru_cache(maxsize=None)
def _run_file(name, workdir):
    with open(os.path.join(DOCS, name), encoding="utf-8") as f:
        blocks = extract_blocks(f.read())
    env = _environment(any(kind == "console" for *_, kind in blocks))
    sources = json.dumps([(kind, [c for c, _ in console_commands(source)] if kind == "console" else source)
                          for _, source, _, kind in blocks])
    proc = subprocess.run([sys.executable, "-c", _RUNNER, ROOT], input=sources, capture_output=True,
                          text=True, cwd=workdir, env=env, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"{name}: the example runner crashed:\n{proc.stderr[-4000:]}")
    return blocks, json.loads(proc.stdout.splitlines()[-1])


def _normalize(text):
    return " ".join(text.split())


def output_matches(expected, actual):
    """Whitespace-normalized equality; `[...]` in `expected` matches any text."""
    want, got = _normalize(expected), _normalize(actual)
    if "[...]" not in want:
        return want == got
    pattern = ".*?".join(re.escape(p.strip()) for p in want.split("[...]"))
    return re.fullmatch(pattern, got, re.S) is not None


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("docs"))


def test_there_are_docs():
    assert {"guide.md", "format.md", "architecture.md"} <= set(_doc_files())


@pytest.mark.parametrize("name,index", _cases())
def test_doc_example(name, index, workdir):
    blocks, results = _run_file(name, workdir)
    line, source, expected, kind = blocks[index]
    result = results[index]
    assert result["ok"], f"docs/{name}, the {kind} block at line {line} failed:\n{result['error']}"
    if kind == "console":
        for (command, want), got in zip(console_commands(source), result["stdout"]):
            assert output_matches(want, got), (
                f"docs/{name}, the console block at line {line}: `{command}` printed:\n{got}\n"
                f"but the doc shows:\n{want}")
    elif expected is not None:
        assert output_matches(expected, result["stdout"]), (
            f"docs/{name}, the python block at line {line} printed:\n{result['stdout']}\n"
            f"but the doc shows:\n{expected}")


def test_extract_and_match_helpers():
    text = "x\n```python\nprint(1)\n```\n\n```text\n1\n```\n```python\npass\n```\n"
    blocks = extract_blocks(text)
    assert [(b[0], b[2], b[3]) for b in blocks] == [(2, "1\n", "python"), (9, None, "python")]
    console = "```console\n$ defun show f.json\n# @f\n\n$ ls\n```\n"
    [(line, source, expected, kind)] = extract_blocks(console)
    assert (line, expected, kind) == (1, None, "console")
    assert console_commands(source) == [("defun show f.json", "# @f\n"), ("ls", "")]
    with pytest.raises(ValueError):
        console_commands("output before a command\n$ ls\n")
    assert output_matches("a  b\n c", "a b c")
    assert not output_matches("a b", "a b c")
    assert output_matches("f([...]) = 3", "f(x, y) = 3")
    assert not output_matches("f([...]) = 3", "f(x, y) = 4")
