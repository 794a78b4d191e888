"""df.dask: blockwise inference and data-parallel gradients over dask arrays, by shipping documents.

One LocalCluster (2 worker processes, 1 thread each) serves the module; tests that need no
cluster compute with the threaded scheduler. The worker-kill test runs last (it restarts a
worker of the shared cluster).
"""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
threadpoolctl = pytest.importorskip("threadpoolctl")

import defun as df  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def client():
    # distributed's nanny runs in this process and puts its `pre-spawn-environ` (one
    # OMP/OPENBLAS/MKL thread, PYTHONHASHSEED...) into this process's os.environ for its
    # workers to inherit, at start and at every restart: the module's tests run with them,
    # and the environment is put back when the cluster is gone (conftest checks it).
    saved = dict(os.environ)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    c = distributed.Client(cluster, set_as_default=False)
    yield c
    c.close()
    cluster.close()
    os.environ.clear()
    os.environ.update(saved)


def worker_blas_threads(client):
    """{worker: BLAS thread counts}: the nanny starts each worker with one thread."""
    return client.run(lambda: sorted({p["num_threads"] for p in threadpoolctl.threadpool_info()
                                      if p["user_api"] == "blas"}))


def threads(collection):
    return collection.compute(scheduler="threads")


# ---------------------------------------------------------------------------------------
# a small model: weights in variables, read by the traced functions

class Model:
    def __init__(self, n_in=5, hidden=7, n_out=3, seed=0):
        rng = np.random.default_rng(seed)
        self.w0 = df.Variable(rng.normal(0, 0.5, (n_in, hidden)).astype(np.float32), name="w0")
        self.b0 = df.Variable(rng.normal(0, 0.1, hidden).astype(np.float32), name="b0")
        self.w1 = df.Variable(rng.normal(0, 0.5, (hidden, n_out)).astype(np.float32), name="w1")
        self.b1 = df.Variable(np.zeros(n_out, np.float32), name="b1")
        self.variables = [self.w0, self.b0, self.w1, self.b1]

    def logits(self, x):
        return df.tanh(x @ self.w0 + self.b0) @ self.w1 + self.b1


def data(n=103, n_in=5, n_out=3, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, n_in)).astype(np.float32), rng.integers(0, n_out, n).astype(np.int32)


def make_loss_sum(model):
    @df.defun
    def loss_sum(x, labels):
        return df.reduce_sum(df.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=model.logits(x)))
    return loss_sum


def tape_result(loss_sum, variables, *arrays):
    """The single-process result: the loss's Python code run eagerly on whole arrays."""
    with df.GradientTape() as tape:
        loss = loss_sum.python_function(*arrays)
    return loss.numpy(), [None if g is None else np.asarray(df.convert_to_tensor(g))
                          for g in tape.gradient(loss, variables)]


def assert_same_result(got, expected, rtol=1e-5, atol=1e-6):
    (loss, grads), (exp_loss, exp_grads) = got, expected
    np.testing.assert_allclose(loss.numpy(), exp_loss, rtol=rtol)
    assert len(grads) == len(exp_grads)
    for g, e in zip(grads, exp_grads):
        if e is None:
            assert g is None
        else:
            assert g.dtype is df.float32 and g.shape == e.shape
            np.testing.assert_allclose(g.numpy(), e, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------
# map_blocks

@pytest.mark.parametrize("chunks", [103, 25, 10, (40, 30, 33), (1, 101, 1)])
def test_map_blocks_matches_eager(chunks):
    model = Model()
    predict = df.defun(model.logits)
    x, _ = data()
    y = df.dask.map_blocks(predict, da.from_array(x, chunks=(chunks, -1)))
    np.testing.assert_allclose(threads(y), model.logits(x).numpy(), rtol=1e-6, atol=1e-6)


def test_map_blocks_with_several_outputs_computes_each_alone_and_together():
    """Each output is its own dask array: computed alone (any order) or together."""
    model = Model()

    @df.defun
    def f(x):
        logits = model.logits(x)
        return {"logits": logits, "top": df.argmax(logits, axis=1), "sq": x * x}
    x, _ = data()
    want = {k: v.numpy() for k, v in f(df.constant(x)).items()}
    for order in (["top", "sq", "logits"], ["logits", "top", "sq"]):
        out = df.dask.map_blocks(f, da.from_array(x, chunks=(25, -1)))
        for k in order:
            np.testing.assert_allclose(threads(out[k]), want[k], rtol=1e-6, atol=1e-6)
    out = df.dask.map_blocks(f, da.from_array(x, chunks=(25, -1)))
    got = da.compute(out, scheduler="threads")[0]
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6)


def test_map_blocks_on_the_cluster(client):
    model = Model()
    predict = df.defun(model.logits)
    x, _ = data(n=1000)
    y = df.dask.map_blocks(predict, da.from_array(x, chunks=(128, -1)))
    np.testing.assert_allclose(client.compute(y, sync=True), model.logits(x).numpy(), rtol=1e-6, atol=1e-6)


def test_map_blocks_over_a_memmapped_npy(tmp_path):
    model = Model()
    x, _ = data(n=500)
    np.save(tmp_path / "x.npy", x)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert isinstance(mm, np.memmap)
    cf = df.defun(model.logits).get_concrete_function(df.TensorSpec([None, 5], df.float32))
    y = df.dask.map_blocks(cf, da.from_array(mm, chunks=(64, -1)))
    np.testing.assert_allclose(threads(y), model.logits(x).numpy(), rtol=1e-6, atol=1e-6)


class CountingSource:
    """An array-like for da.from_array that counts the blocks read from it."""

    def __init__(self, array):
        self.array, self.shape, self.dtype, self.ndim = array, array.shape, array.dtype, array.ndim
        self.reads = 0

    def __getitem__(self, index):
        self.reads += 1
        return self.array[index]


def test_map_blocks_is_lazy():
    model = Model()
    x, _ = data()
    source = CountingSource(x)
    xd = da.from_array(source, chunks=(20, -1))
    wrapped = source.reads          # dask may peek at an empty slice for its metadata
    y = df.dask.map_blocks(df.defun(model.logits), xd)
    z = (y * 2).sum(axis=1)
    assert source.reads == wrapped  # building the graph read nothing
    np.testing.assert_allclose(threads(z), (model.logits(x).numpy() * 2).sum(axis=1), rtol=1e-5)
    assert source.reads == wrapped + 6      # one read per block, at compute time


def test_map_blocks_types_and_shapes_come_from_static_inference():
    model = Model()

    @df.defun
    def several(x):
        logits = model.logits(x)
        return {"logits": logits, "label": df.argmax(logits, axis=1), "every_other": x[::2],
                "twice": df.concat([x, x], axis=0), "outer": df.expand_dims(x, 2) * df.expand_dims(x, 1)}

    x, _ = data()
    out = df.dask.map_blocks(several, da.from_array(x, chunks=(25, -1)))
    assert sorted(out) == ["every_other", "label", "logits", "outer", "twice"]
    assert out["logits"].dtype == np.float32 and out["logits"].chunks == ((25, 25, 25, 25, 3), (3,))
    assert out["label"].dtype == np.int64 and out["label"].chunks == ((25, 25, 25, 25, 3),)
    assert out["every_other"].chunks == ((13, 13, 13, 13, 2), (5,))
    assert out["twice"].chunks == ((50, 50, 50, 50, 6), (5,))
    assert out["outer"].shape == (103, 5, 5) and out["outer"].chunks[1:] == ((5,), (5,))
    got = dict(zip(out, da.compute(*out.values(), scheduler="threads")))
    expected = {k: v.numpy() for k, v in several(x).items()}
    np.testing.assert_array_equal(got["label"], expected["label"])
    np.testing.assert_allclose(got["logits"], expected["logits"], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got["outer"], expected["outer"])
    # blockwise: every block is sliced / doubled on its own
    blocks = [x[i:i + 25] for i in range(0, 103, 25)]
    np.testing.assert_array_equal(got["every_other"], np.concatenate([b[::2] for b in blocks]))
    np.testing.assert_array_equal(got["twice"], np.concatenate([np.concatenate([b, b]) for b in blocks]))


def test_map_blocks_aligns_and_rechunks_inputs():
    @df.defun
    def weighted(x, w):
        return x * df.expand_dims(w, 1)

    x, _ = data()
    w = np.linspace(0, 1, 103).astype(np.float32)
    xd = da.from_array(x, chunks=(30, 2))            # chunked along axis 1 too: rechunked
    wd = da.from_array(w, chunks=17)                 # other row blocks: aligned to x's
    y = df.dask.map_blocks(weighted, xd, wd)
    assert y.chunks == ((30, 30, 30, 13), (5,))
    np.testing.assert_allclose(threads(y), x * w[:, None], rtol=1e-6)


def test_map_blocks_takes_loaded_functions_documents_and_files(tmp_path):
    model = Model()
    predict = df.defun(model.logits)
    cf = predict.get_concrete_function(df.TensorSpec([None, 5], df.float32))
    df.export_json(cf, tmp_path / "predict.json")
    x, _ = data()
    xd = da.from_array(x, chunks=(40, -1))
    expected = model.logits(x).numpy()
    for f in (df.load_json(tmp_path / "predict.json"), df.export_json(cf), str(tmp_path / "predict.json"),
              tmp_path / "predict.json"):
        np.testing.assert_allclose(threads(df.dask.map_blocks(f, xd)), expected, rtol=1e-6, atol=1e-6)


def test_map_blocks_refuses_clearly():
    model = Model()
    predict = df.defun(model.logits)
    x, _ = data()
    xd = da.from_array(x, chunks=(40, -1))
    with pytest.raises(df.errors.InvalidArgumentError, match=r"dtype float64.*astype\(np.float32\)"):
        df.dask.map_blocks(predict.get_concrete_function(df.TensorSpec([None, 5], df.float32)),
                           xd.astype(np.float64))
    fixed = predict.get_concrete_function(df.TensorSpec([40, 5], df.float32))
    with pytest.raises(df.errors.InvalidArgumentError, match=r"blocks of \[23, 40\] rows.*None batch size"):
        df.dask.map_blocks(fixed, xd)
    with pytest.raises(df.errors.InvalidArgumentError, match=r"axis 1 differs"):
        df.dask.map_blocks(fixed, da.from_array(np.ones((80, 4), np.float32), chunks=40))
    with pytest.raises(df.errors.InvalidArgumentError, match="output 0 of .* is a scalar"):
        df.dask.map_blocks(df.defun(lambda x: df.reduce_sum(x)), xd)
    with pytest.raises(TypeError, match="takes 1 arguments"):
        df.dask.map_blocks(predict.get_concrete_function(df.TensorSpec([None, 5], df.float32)), xd, xd)
    with pytest.raises(TypeError, match="expected a dask array; wrap it"):
        df.dask.map_blocks(predict, x)
    with pytest.raises(df.errors.InvalidArgumentError, match="array 1 has 50 rows, array 0 has 103"):
        df.dask.map_blocks(df.defun(lambda a, b: a + b), xd, xd[:50])
    with pytest.raises(TypeError, match="expected a df.defun, a ConcreteFunction"):
        df.dask.map_blocks(model.logits, xd)

    counter = df.Variable(0.0)

    @df.defun
    def counting(x):
        counter.assign_add(1.0)
        return x * 2.0
    with pytest.raises(df.errors.InvalidArgumentError, match="assigns variables"):
        df.dask.map_blocks(counting, xd)


def test_a_bad_document_fails_on_the_client(client):
    model = Model()
    cf = df.defun(model.logits).get_concrete_function(df.TensorSpec([None, 5], df.float32))
    broken = df.export_json(cf)
    broken["functions"][0]["nodes"][0]["op"] = "no_such_op"
    before = client.run(df.dask.build_counts)
    xd = da.from_array(data()[0], chunks=(40, -1))
    with pytest.raises(df.errors.GraphFormatError, match=r"functions\[0\]\.nodes\[0\]\.op"):
        df.dask.map_blocks(broken, xd)
    assert client.run(df.dask.build_counts) == before      # no worker saw it


# ---------------------------------------------------------------------------------------
# shipping: documents only, built once per worker, large ones scattered

def test_tasks_carry_documents_not_code(client):
    model = Model()
    lock = threading.Lock()          # cannot be pickled: any attempt to ship f would fail

    @df.defun
    def predict(x):
        with lock:
            return model.logits(x)

    x, labels = data(n=400)
    xd = da.from_array(x, chunks=(100, -1))
    y = df.dask.map_blocks(predict, xd)
    layer = y.__dask_graph__().layers[y.name]
    for task in layer.values():
        fn, key, text, *blocks = task
        assert fn.__module__ == "defun.dask" and isinstance(text, str)
        assert json.loads(text)["format"] == "defun.graph"
        assert all(isinstance(b, tuple) and isinstance(b[0], str) for b in blocks)
    np.testing.assert_allclose(client.compute(y, sync=True), model.logits(x).numpy(), rtol=1e-6, atol=1e-6)

    @df.defun
    def loss_sum(x, labels):
        with lock:
            return make_loss_sum(model)(x, labels)
    got = df.dask.value_and_gradients(loss_sum, model.variables, xd,
                                      da.from_array(labels, chunks=100), client=client)
    assert_same_result(got, tape_result(loss_sum, model.variables, x, labels))


def test_each_worker_builds_a_document_once(client):
    model = Model(seed=7)        # a document no earlier test shipped
    predict = df.defun(model.logits)
    x, _ = data(n=600)
    y = df.dask.map_blocks(predict, da.from_array(x, chunks=(25, -1)))   # 24 blocks
    before = client.run(df.dask.build_counts)
    for _ in range(3):
        np.testing.assert_allclose(client.compute(y, sync=True), model.logits(x).numpy(), rtol=1e-6, atol=1e-6)
    after = client.run(df.dask.build_counts)
    new = [{k: n for k, n in after[w].items() if k not in before[w]} for w in sorted(after)]
    key, = new[0]
    assert new == [{key: 1}, {key: 1}]      # both workers ran blocks; each built it once
    assert all({k: after[w][k] for k in before[w]} == before[w] for w in after)   # nothing rebuilt


def test_a_large_document_is_scattered_once(client, monkeypatch):
    monkeypatch.setattr(df.dask, "SCATTER_BYTES", 0)      # every document counts as large
    scattered = []
    scatter = client.scatter
    monkeypatch.setattr(client, "scatter", lambda data, **kw: scattered.append(data) or scatter(data, **kw))
    model = Model(seed=3)
    loss_sum = make_loss_sum(model)
    x, labels = data(n=300)
    xd, yd = da.from_array(x, chunks=(50, -1)), da.from_array(labels, chunks=50)
    with client.as_current():       # map_blocks ships for the client current when it is called
        y = df.dask.map_blocks(df.defun(model.logits), xd)
    refs = {task[2] for task in y.__dask_graph__().layers[y.name].values()}
    assert len(refs) == 1 and isinstance(refs.pop(), distributed.Future)
    assert len(scattered) == 1 and json.loads(scattered[0])["format"] == "defun.graph"
    np.testing.assert_allclose(client.compute(y, sync=True), model.logits(x).numpy(), rtol=1e-6, atol=1e-6)

    for _ in range(3):        # the step document is scattered by the first call only
        got = df.dask.value_and_gradients(loss_sum, model.variables, xd, yd, client=client)
        assert_same_result(got, tape_result(loss_sum, model.variables, x, labels))
        for v in model.variables:
            v.assign_sub(0.01 * np.ones(v.shape, np.float32))
    assert len(scattered) == 2


# ---------------------------------------------------------------------------------------
# value_and_gradients

@pytest.mark.parametrize("chunks", [103, 25, (50, 50, 3), (1, 102)])
def test_value_and_gradients_equals_the_tape(chunks):
    model = Model()
    loss_sum = make_loss_sum(model)
    unused = df.Variable(np.ones(2, np.float32), name="unused")
    x, labels = data()
    variables = model.variables + [unused]
    got = df.dask.value_and_gradients(loss_sum, variables, da.from_array(x, chunks=(chunks, -1)),
                                      da.from_array(labels, chunks=chunks))
    assert got[1][-1] is None            # not read: no gradient, as from the tape
    assert_same_result(got, tape_result(loss_sum, variables, x, labels))


def test_value_and_gradients_on_the_cluster_is_exact_and_deterministic(client):
    model = Model()
    loss_sum = make_loss_sum(model)
    x, labels = data(n=2000)
    xd, yd = da.from_array(x, chunks=(128, -1)), da.from_array(labels, chunks=128)   # 16 blocks, 2 levels
    on_cluster = df.dask.value_and_gradients(loss_sum, model.variables, xd, yd, client=client)
    assert_same_result(on_cluster, tape_result(loss_sum, model.variables, x, labels))
    with client.as_current():       # client=None: the current scheduler
        again = df.dask.value_and_gradients(loss_sum, model.variables, xd, yd)
    # Bit for bit across processes holds at the same BLAS thread count: the workers run one
    # thread each, so the threaded scheduler here does too.
    assert set(map(tuple, worker_blas_threads(client).values())) == {(1,)}
    with threadpoolctl.threadpool_limits(limits=1):
        local = df.dask.value_and_gradients(loss_sum, model.variables, xd, yd)
    for other in (again, local):         # the same tree of sums wherever it runs: identical bits
        np.testing.assert_array_equal(other[0].numpy(), on_cluster[0].numpy())
        for a, b in zip(other[1], on_cluster[1]):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_value_and_gradients_sends_current_values_and_traces_once():
    model = Model()
    loss_sum = make_loss_sum(model)
    x, labels = data()
    xd, yd = da.from_array(x, chunks=(30, -1)), da.from_array(labels, chunks=30)
    counts = []
    for _ in range(3):
        got = df.dask.value_and_gradients(loss_sum, model.variables, xd, yd)
        assert_same_result(got, tape_result(loss_sum, model.variables, x, labels))   # not stale
        counts.append(df.dask.build_counts())
        for g, v in zip(got[1], model.variables):
            v.assign_sub(g * 0.1)
    assert loss_sum.trace_count == 1
    assert counts[0] == counts[1] == counts[2]      # one step document, built once, for all calls


def test_value_and_gradients_through_calls_conds_loops_and_gathers():
    rng = np.random.default_rng(2)
    w = df.Variable(rng.normal(0, 0.5, (3, 4)).astype(np.float32), name="w")
    b = df.Variable(np.full(4, 0.2, np.float32), name="b")
    emb = df.Variable(rng.normal(size=(6, 4)).astype(np.float32), name="emb")

    @df.defun
    def features(x):
        return df.tanh(x @ w)

    @df.defun
    def loss_sum(x, ids):
        h = features(x) + df.gather(emb, ids)
        # (a per-example loss: the branch taken must not depend on which rows share a block)
        h = df.cond(df.reduce_sum(b) > 0, lambda: h * b, lambda: h - b)
        _, h = df.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, df.tanh(h * b + w[0])), (0, h))
        return df.reduce_sum(df.square(h))

    x = rng.normal(size=(40, 3)).astype(np.float32)
    ids = rng.integers(0, 6, 40).astype(np.int32)
    got = df.dask.value_and_gradients(loss_sum, [w, b, emb], da.from_array(x, chunks=(9, -1)),
                                      da.from_array(ids, chunks=9))
    assert_same_result(got, tape_result(loss_sum, [w, b, emb], x, ids), rtol=1e-4)


def test_value_and_gradients_refuses_clearly():
    model = Model()
    x, labels = data()
    xd, yd = da.from_array(x, chunks=(40, -1)), da.from_array(labels, chunks=40)
    loss_sum = make_loss_sum(model)
    with pytest.raises(df.errors.InvalidArgumentError, match=r"reads variable\(s\) 'w1', 'b1'.*not in `variables`"):
        df.dask.value_and_gradients(loss_sum, model.variables[:2], xd, yd)

    @df.defun
    def stepping(x, labels):
        model.b1.assign_add(np.ones(3, np.float32))
        return loss_sum(x, labels)
    with pytest.raises(df.errors.InvalidArgumentError, match="assigns variables; a data-parallel step must be pure"):
        df.dask.value_and_gradients(stepping, model.variables, xd, yd)

    @df.defun
    def per_example(x, labels):
        return df.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=model.logits(x))
    with pytest.raises(df.errors.InvalidArgumentError, match=r"one float scalar, the SUM.*float32\[None\]"):
        df.dask.value_and_gradients(per_example, model.variables, xd, yd)
    with pytest.raises(TypeError, match="must be a df.defun"):
        df.dask.value_and_gradients(lambda x, y: x, model.variables, xd, yd)
    with pytest.raises(df.errors.InvalidArgumentError, match="'w0' is listed twice"):
        df.dask.value_and_gradients(loss_sum, model.variables + [model.w0], xd, yd)
    with pytest.raises(TypeError, match=r"variables\[0\] is a ndarray"):
        df.dask.value_and_gradients(loss_sum, [np.ones(3)], xd, yd)


# ---------------------------------------------------------------------------------------
# the training example, the extra, and a worker killed mid-computation (last: it restarts one)

def test_training_example_learns_on_the_cluster(client):
    spec = importlib.util.spec_from_file_location("train_dask_example",
                                                  os.path.join(ROOT, "examples", "train_dask.py"))
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    result = example.train(client, epochs=1, verbose=False)
    # Chance is 0.1; one epoch of SGD already classifies most digits.
    assert result["test_accuracy"] > 0.85
    assert result["predictions_match"]
    assert result["loss_trace_count"] == 1


def test_df_imports_without_dask_and_names_the_extra():
    code = ("import sys\n"
            "sys.modules['dask'] = None\n"         # as if dask were not installed
            "sys.modules['distributed'] = None\n"
            "import defun as df\n"
            "print(df.constant(2.0) * 3.0)\n"
            "try:\n"
            "    df.dask.map_blocks(None, None)\n"
            "except ImportError as e:\n"
            "    print('ImportError:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "numpy=6." in out.stdout
    assert "ImportError: df.dask needs dask: install the optional extra [dask]" in out.stdout


def test_a_worker_killed_mid_computation_is_retried_and_the_result_is_exact(client, monkeypatch):
    monkeypatch.setattr(df.dask, "SCATTER_BYTES", 0)      # the scattered document must survive too
    model = Model(n_in=64, hidden=128, n_out=10, seed=5)
    loss_sum = make_loss_sum(model)
    n, rows = 32 * 2048, 2048
    x = da.random.default_rng(0).standard_normal((n, 64), chunks=(rows, -1), dtype=np.float32)
    labels = (da.random.default_rng(1).integers(0, 10, n, chunks=rows)).astype(np.int32)
    # The reference runs here (threads): a cluster run of the same graph could reuse its results.
    # It runs BLAS on one thread, as the workers do (bits are the same across processes at the
    # same thread count; a 64x128 matmul on two threads rounds differently).
    assert set(map(tuple, worker_blas_threads(client).values())) == {(1,)}
    with threadpoolctl.threadpool_limits(limits=1):
        undisturbed = df.dask.value_and_gradients(loss_sum, model.variables, x, labels)

    pids = client.run(os.getpid)
    result = {}
    worker = threading.Thread(target=lambda: result.update(
        value=df.dask.value_and_gradients(loss_sum, model.variables, x, labels, client=client)))
    worker.start()
    victim = None
    deadline = time.monotonic() + 30
    while victim is None and worker.is_alive() and time.monotonic() < deadline:
        for address, keys in client.processing().items():
            if any("-grads-" in str(k) for k in keys):
                victim = address
                break
        time.sleep(0.005)
    assert victim is not None, "the computation ended before a step task was seen running"
    os.kill(pids[victim], signal.SIGKILL)
    worker.join(120)
    assert not worker.is_alive() and "value" in result
    loss, grads = result["value"]
    np.testing.assert_array_equal(loss.numpy(), undisturbed[0].numpy())
    for g, e in zip(grads, undisturbed[1]):
        np.testing.assert_array_equal(g.numpy(), e.numpy())
    client.wait_for_workers(2, timeout=300)       # the nanny restarted it (slow on a loaded machine)
    assert pids[victim] not in client.run(os.getpid).values()     # in a new process


def test_map_blocks_takes_a_big_endian_array():
    model = Model()
    x, _ = data()
    y = df.dask.map_blocks(df.defun(model.logits), da.from_array(x.astype(">f4"), chunks=(25, -1)))
    np.testing.assert_allclose(threads(y), model.logits(x).numpy(), rtol=1e-6, atol=1e-6)
