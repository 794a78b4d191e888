"""examples/gaussian_process.py: a short fit improves the likelihood and beats the mean on
held-out patients; its likelihood equals scikit-learn's; the defun'd step equals the eager one."""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")

import defun as df  # noqa: E402

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                     "gaussian_process.py")


def _load_example():
    spec = importlib.util.spec_from_file_location("gaussian_process_example", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_short_fit_improves_likelihood_and_predicts_held_out_data(tmp_path):
    example = _load_example()
    out = tmp_path / "gp.png"
    result = example.main(steps=20, quick=True, out=str(out), verbose=False)
    assert result["final_nll"] < result["initial_nll"] - 5, result
    assert result["losses"][-1] < result["losses"][0]
    # the fitted posterior mean beats predicting the training mean by a clear margin
    assert result["test_rmse"] < 0.85 * result["baseline_rmse"], result
    assert result["test_rmse"] <= result["initial_test_rmse"]
    assert result["trace_count"] == 1
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000


def test_likelihood_matches_scikit_learn():
    """The same model's log marginal likelihood from sklearn's GaussianProcessRegressor."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    example = _load_example()
    x, y, _, _, _ = example.load_data()
    model = example.GaussianProcess(x, y)
    model.log_lengthscales.assign(np.linspace(-0.5, 1.5, x.shape[1]))
    model.log_signal.assign(np.float64(0.3))
    model.log_noise.assign(np.float64(-1.2))
    hp = model.hyperparameters()
    kernel = (ConstantKernel(hp["signal_variance"]) * RBF(hp["lengthscales"])
              + WhiteKernel(hp["noise_variance"]))
    gp = GaussianProcessRegressor(kernel, alpha=example.JITTER, optimizer=None).fit(x, y[:, 0])
    np.testing.assert_allclose(float(model.negative_log_marginal_likelihood()),
                               -gp.log_marginal_likelihood_value_, rtol=1e-10)
    mean, var = model.predict(df.constant(x[:20]))
    sk_mean, sk_std = gp.predict(x[:20], return_std=True)
    np.testing.assert_allclose(mean.numpy(), sk_mean, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(var.numpy(), sk_std ** 2, rtol=1e-6)


def test_defun_step_matches_eager_step():
    example = _load_example()
    x, y, _, _, _ = example.load_data()
    x, y = x[:60], y[:60]
    eager_model, graph_model = example.GaussianProcess(x, y), example.GaussianProcess(x, y)
    eager_step = example.make_step(eager_model, example.Adam(eager_model.variables))
    graph_step = df.defun(example.make_step(graph_model, example.Adam(graph_model.variables)))
    for _ in range(3):
        np.testing.assert_allclose(float(graph_step()), float(eager_step()), rtol=1e-12)
    for a, b in zip(eager_model.variables, graph_model.variables):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-10, atol=1e-12)
    assert not np.allclose(graph_model.log_noise.numpy(), example.GaussianProcess(x, y).log_noise.numpy())


def test_command_line_quick_run(tmp_path):
    out = tmp_path / "posterior.png"
    proc = subprocess.run([sys.executable, _PATH, "--quick", "--out", str(out)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "negative log marginal likelihood" in proc.stdout and out.exists()
