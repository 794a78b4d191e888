"""examples/per_example_gradients.py on a small batch: the vmapped per-example gradients
equal the Python loop's, one DP-SGD step equals numpy's clip-sum-noise-mean of the loop's
gradients, a short training run learns and writes its plot."""
import importlib.util
import os

import numpy as np
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                     "per_example_gradients.py")


def _load():
    spec = importlib.util.spec_from_file_location("per_example_gradients_example", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dp_step_is_the_clipped_noised_mean_of_the_loops_gradients():
    ex = _load()
    x, y, _, _ = ex.load_data()
    x, y = x[:12], y[:12]
    params = ex.init_params(1)
    per = ex.loop_gradients(params, x, y)
    norms = np.sqrt(sum(np.sum(g.reshape(len(x), -1) ** 2, axis=1) for g in per))
    clip, lr = np.float32(0.7), np.float32(0.3)
    noise = [np.random.default_rng(2).standard_normal(p.shape).astype(np.float32) for p in params]
    scale = clip / np.maximum(norms, clip)
    assert (scale < 1).any()       # some examples are clipped
    want = [p - lr * ((g * scale.reshape((-1,) + (1,) * (g.ndim - 1))).sum(0) + z * clip) / len(x)
            for p, g, z in zip(params, per, noise)]
    new, got_norms = ex.dp_step(*params, x, y, noise, clip, lr)
    np.testing.assert_allclose(got_norms.numpy(), norms, rtol=1e-5)
    for a, b in zip(new, want):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-5, atol=1e-6)


def test_main_small_run(tmp_path):
    ex = _load()
    out = tmp_path / "peg.png"
    result = ex.main(epochs=2, batch=32, noise=0.3, out=str(out), verbose=False, timing_batch=16)
    assert result["max_diff"] < 1e-5
    assert out.exists() and out.stat().st_size > 10_000
    assert result["history"]["test"][-1] > 0.5           # chance is 0.1
    assert result["history"]["loss"][-1] < result["history"]["loss"][0]
    assert set(result["times"]) == {"vmap", "loop"} and all(t > 0 for t in result["times"].values())
