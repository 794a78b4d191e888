"""Test-wide settings. The library is imported as installed (`pip install -e .`), as
`defun`, `defun.runtime` and `defun.graph`; nothing here changes `sys.path`.

It also owns the guard on the process environment: a test (or a module's fixtures) that
leaves `os.environ` changed fails, naming the variables, because a changed thread variable
(OPENBLAS_NUM_THREADS...) reaches every subprocess started later and makes results depend
on the order the tests ran in. The environment is put back before the failure is reported,
so one offender does not make the tests after it fail too."""
import os

import pytest

_PYTEST_OWN = "PYTEST_CURRENT_TEST"       # pytest itself names the running test phase there
# Importing scikit-learn (the examples' data) or jax (a test reference) sets these, once, with
# os.environ.setdefault: Intel OpenMP's behaviour at fork, XLA's logging and TPU probing;
# none is a thread count or changes a result here.
_SET_BY_IMPORTS = {"KMP_DUPLICATE_LIB_OK": "True", "KMP_INIT_AT_FORK": "FALSE",   # sklearn
                   "TF_CPP_MIN_LOG_LEVEL": "1", "TPU_SKIP_MDS_QUERY": "1"}        # jax


# The environment's own dict (bytes on POSIX), copied and compared without decoding each
# variable: the guard runs around every test, so its cost is paid ~26,000 times a run.
_RAW = getattr(os.environ, "_data", None)


def _snapshot():
    if _RAW is None:
        return dict(os.environ)
    raw = _RAW.copy()
    raw.pop(os.environ.encodekey(_PYTEST_OWN), None)
    return raw


def _decoded(snapshot):
    if _RAW is None:
        return snapshot
    return {os.environ.decodekey(k): os.environ.decodevalue(v) for k, v in snapshot.items()}


def _changed(before):
    """The names of the variables that differ between `before` and os.environ now."""
    now = os.environ
    return sorted(k for k in before.keys() | now.keys()
                  if before.get(k) != now.get(k) and k != _PYTEST_OWN
                  and not (k not in before and _SET_BY_IMPORTS.get(k) == now[k]))


def _check_environ(snapshot, what):
    if _snapshot() == snapshot:
        return
    before = _decoded(snapshot)
    changed = _changed(before)
    if changed:
        shown = ", ".join(f"{k}={os.environ.get(k)!r} (was {before.get(k)!r})" for k in changed)
        for k in changed:
            if k in before:
                os.environ[k] = before[k]
            else:
                del os.environ[k]
        pytest.fail(f"{what} left os.environ changed: {shown}; nothing in a test may change the "
                    f"process environment (pass env= to a subprocess instead)", pytrace=False)


@pytest.fixture(autouse=True, scope="module")
def _module_leaves_environ_unchanged(request):
    """Module-scoped fixtures (a Dask cluster, say) must leave os.environ as they found it."""
    before = _snapshot()
    yield
    _check_environ(before, f"{request.module.__name__} (its module-scoped fixtures)")


@pytest.fixture(autouse=True)
def _test_leaves_environ_unchanged(request):
    before = _snapshot()
    yield
    _check_environ(before, request.node.nodeid)
