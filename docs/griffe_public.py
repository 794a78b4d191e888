"""A griffe extension for the docs site (mkdocs.yml loads it through mkdocstrings): every
public name of defun is documented where the user reaches it, `df.add` as `defun.add`.

defun's ops are made when the package is imported (their `__module__` names a module that
does not hold them under that name), and `defun.runtime` / `defun.graph` live in folders
beside `defun/` (pyproject.toml maps them), where griffe does not look; so griffe's aliases
to where an object was defined cannot always be resolved. This extension inspects each such
object, or namespace module (`df.errors` is `defun.runtime.errors`), in place instead.
"""
import griffe


class PublicNamesInPlace(griffe.Extension):
    """Replace each alias griffe makes while inspecting a defun module by the object itself."""

    def on_alias_instance(self, *, alias, node, agent, **kwargs):
        if not alias.target_path.startswith("defun."):
            return
        child = next((c for c in node.children if c.name == alias.name), None)
        if child is None:
            return
        if not child.is_module:
            agent.inspect(child)       # sets the inspected object as the member, over the alias
            return
        # a namespace module defined elsewhere: inspect it as a submodule of its public parent
        inspector = griffe.Inspector(child.name, filepath=None, parent=agent.current.module,
                                     extensions=agent.extensions, docstring_parser=agent.docstring_parser,
                                     docstring_options=agent.docstring_options,
                                     lines_collection=agent.lines_collection,
                                     modules_collection=agent.modules_collection)
        inspector.inspect_module(child)
        agent.current.set_member(child.name, inspector.current.module)


def fence_doctests(text):
    """`text` with each run of doctest lines (`>>> ...` up to a blank line) fenced as code,
    so Markdown shows it as typed instead of reading `[[1., 2.]]` as a link."""
    out, in_run = [], False
    for line in text.split("\n"):
        starts = line.lstrip().startswith(">>>")
        if starts and not in_run:
            out.append("```pycon")
            in_run = True
        elif in_run and not line.strip():
            out.append("```")
            in_run = False
        out.append(line)
    if in_run:
        out.append("```")
    return "\n".join(out)


class DoctestsAsCode(griffe.Extension):
    """Fence the doctest examples of every docstring griffe reads."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
