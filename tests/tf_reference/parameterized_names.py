"""`absl.testing.parameterized` for the reference files when absl is not installed: the two
names they use, `parameters` and `TestCase` (each parameter set becomes its own test method,
`test_name0`, `test_name1`, ... as absl numbers them)."""
import functools
import unittest

_CASES = "_tf_reference_cases"


def parameters(*cases):
    """Run the decorated test once per case (a tuple: positional arguments; a dict: keyword
    arguments; anything else: the one argument)."""
    def mark(method):
        setattr(method, _CASES, cases)
        return method
    return mark


def _bound(method, case):
    @functools.wraps(method)
    def test(self):
        if isinstance(case, dict):
            return method(self, **case)
        return method(self, *case) if isinstance(case, tuple) else method(self, case)
    return test


class TestCase(unittest.TestCase):
    """Expands every method marked by `parameters` when a subclass is defined."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name, method in list(vars(cls).items()):
            cases = getattr(method, _CASES, None)
            if cases is None:
                continue
            delattr(cls, name)
            for i, case in enumerate(cases):
                test = _bound(method, case)
                test.__name__ = f"{name}{i}"
                setattr(cls, f"{name}{i}", test)
