"""The cyclic garbage collector paused while compile-time work runs (tracing, passes,
code generation, loading): one pause count across threads."""
import contextlib
import gc
import threading

__all__ = ["paused_gc"]

_gc_pause = {"depth": 0, "was_enabled": False}     # compile-time jobs running, in any thread
_gc_pause_lock = threading.Lock()


@contextlib.contextmanager
def paused_gc():
    """Pause the cyclic garbage collector for a compile-time job (nothing of the user's runs
    meanwhile): compiling makes many small objects forming reference cycles (node <->
    tensor), and each full collection walks them all again. Pauses nest and overlap across
    threads: the first to start records whether the collector was on, the last to end puts
    it back so (one thread finishing never re-enables it under another still compiling)."""
    with _gc_pause_lock:
        if _gc_pause["depth"] == 0:
            _gc_pause["was_enabled"] = gc.isenabled()
            gc.disable()
        _gc_pause["depth"] += 1
    try:
        yield
    finally:
        with _gc_pause_lock:
            _gc_pause["depth"] -= 1
            if _gc_pause["depth"] == 0 and _gc_pause["was_enabled"]:
                gc.enable()
