"""df.save_variables / df.restore_variables: .npz by name, atomic writes, all-or-nothing restores."""
import os

import numpy as np
import pytest

import defun as df


def make_vars():
    return [df.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="dense/kernel"),
            df.Variable(np.array(7, np.int64), name="step"),
            df.Variable(np.array([0.25, -1.5]), name="allow_pickle")]   # a name np.savez would misread


def test_round_trip_keeps_values_shapes_and_dtypes(tmp_path):
    vs = make_vars()
    path = tmp_path / "ck.npz"
    assert df.save_variables(path, vs) == str(path)
    with np.load(path, allow_pickle=False) as data:
        assert sorted(data.files) == ["allow_pickle", "dense/kernel", "step"]
        np.testing.assert_array_equal(data["dense/kernel"], vs[0].numpy())
    originals = [v.numpy() for v in vs]
    for v in vs:
        v.assign(np.zeros(v.shape, v.dtype.np))
    df.restore_variables(str(path), vs)
    for v, o in zip(vs, originals):
        assert v.numpy().dtype == o.dtype
        np.testing.assert_array_equal(v.numpy(), o)
    df.restore_variables(path, vs[0])       # one variable, and a subset of the entries


def test_the_write_is_atomic(tmp_path, monkeypatch):
    vs = make_vars()
    path = tmp_path / "ck.npz"
    df.save_variables(path, vs)
    before = path.read_bytes()
    renames = []
    real_replace = os.replace

    def spy(src, dst):
        renames.append((src, dst))
        return real_replace(src, dst)
    monkeypatch.setattr(os, "replace", spy)
    vs[0].assign(np.ones((2, 3), np.float32))
    df.save_variables(path, vs)
    (src, dst), = renames
    assert os.path.dirname(src) == str(tmp_path) and dst == str(path)   # temp file + rename, same dir
    assert path.read_bytes() != before
    # a failure while writing leaves the previous file and no temporary behind
    good = path.read_bytes()
    calls = []

    def failing(fp, array, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        return real_write(fp, array, **kw)
    real_write = np.lib.format.write_array
    monkeypatch.setattr(np.lib.format, "write_array", failing)
    with pytest.raises(OSError, match="disk full"):
        df.save_variables(path, vs)
    assert path.read_bytes() == good
    assert sorted(os.listdir(tmp_path)) == ["ck.npz"]


def test_duplicate_names_are_refused(tmp_path):
    a, b = df.Variable(1.0, name="same"), df.Variable(2.0, name="same")
    for fn in (df.save_variables, df.restore_variables):
        with pytest.raises(df.errors.InvalidArgumentError, match="two variables are named 'same'"):
            fn(tmp_path / "ck.npz", [a, b])
    assert not (tmp_path / "ck.npz").exists()


def test_restore_checks_every_entry_before_assigning_any(tmp_path):
    vs = make_vars()
    path = tmp_path / "ck.npz"
    df.save_variables(path, vs)
    fresh = [df.Variable(np.full((2, 3), 9.0, np.float32), name="dense/kernel"),
             df.Variable(np.array(0, np.int64), name="step"),
             df.Variable(np.zeros(3), name="allow_pickle"),                 # wrong shape
             df.Variable(np.zeros(2), name="missing/one")]
    with pytest.raises(df.errors.NotFoundError, match="has no entry 'missing/one'"):
        df.restore_variables(path, fresh)
    with pytest.raises(df.errors.InvalidArgumentError,
                       match=r"entry 'allow_pickle' .* is float64\[2\], the variable is float64\[3\]"):
        df.restore_variables(path, fresh[:3])
    typed = df.Variable(np.zeros(2, np.float32), name="allow_pickle")
    with pytest.raises(df.errors.InvalidArgumentError, match=r"is float64\[2\], the variable is float32\[2\]"):
        df.restore_variables(path, [fresh[0], typed])
    np.testing.assert_array_equal(fresh[0].numpy(), np.full((2, 3), 9.0))   # nothing was assigned
    assert int(fresh[1].numpy()) == 0


def test_missing_and_corrupt_files(tmp_path):
    v = df.Variable(np.zeros(2), name="v")
    with pytest.raises(df.errors.NotFoundError, match="no checkpoint file"):
        df.restore_variables(tmp_path / "nope.npz", [v])
    with pytest.raises(df.errors.NotFoundError, match="does not exist"):
        df.save_variables(tmp_path / "no_dir" / "ck.npz", [v])
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"this is not a zip file at all")
    truncated = tmp_path / "cut.npz"
    df.save_variables(truncated, [df.Variable(np.arange(1000.0), name="v")])
    truncated.write_bytes(truncated.read_bytes()[:500])
    single = tmp_path / "single.npy"
    np.save(single, np.zeros(2))
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, v=np.array([object()], dtype=object))
    for bad in (junk, truncated, single, pickled):
        with pytest.raises(df.errors.InvalidArgumentError, match="is not a readable .npz checkpoint"):
            df.restore_variables(bad, [v])
    np.testing.assert_array_equal(v.numpy(), [0.0, 0.0])


def test_optimizer_state_resumes_training_exactly(tmp_path):
    def train(w, opt, steps):
        for k in range(steps):
            with df.GradientTape() as tape:
                loss = df.reduce_sum(df.square(w - float(k)))
            opt.apply_gradients([(tape.gradient(loss, w), w)])

    w = df.Variable(np.array([1.0, -2.0]), name="w")
    opt = df.optimizers.Adam(0.1)
    train(w, opt, 2)
    df.save_variables(tmp_path / "ck.npz", [w] + opt.variables())
    train(w, opt, 3)
    expected = w.numpy()

    w2 = df.Variable(np.zeros(2), name="w")
    opt2 = df.optimizers.Adam(0.1)
    opt2.build([w2])                          # slots exist before the first step
    df.restore_variables(tmp_path / "ck.npz", [w2] + opt2.variables())
    assert int(opt2.iterations.numpy()) == 2
    train(w2, opt2, 3)
    np.testing.assert_array_equal(w2.numpy(), expected)


def test_refused_while_tracing_and_for_non_variables(tmp_path):
    v = df.Variable(1.0, name="v")

    @df.defun
    def f():
        df.save_variables(tmp_path / "ck.npz", [v])
    with pytest.raises(df.errors.TracingError, match="runs eagerly"):
        f()
    with pytest.raises(TypeError, match=r"entry 1 is not a df.Variable \(got EagerTensor\)"):
        df.save_variables(tmp_path / "ck.npz", [v, df.constant(1.0)])


def _inflating_checkpoint(path, name, shape, dtype=np.float32):
    """A deflated .npz whose entry `name` is zeros of `shape` (64 MB of zeros compress to
    some 60 KB), written in 1 MB pieces so the test itself never holds the array."""
    import zipfile
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
              "shape": tuple(shape)}
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    piece = bytes(1 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open(name + ".npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(member, header)
            for start in range(0, nbytes, len(piece)):
                member.write(piece[:min(len(piece), nbytes - start)])


def test_an_entry_of_the_wrong_shape_is_refused_before_it_is_inflated(tmp_path):
    """A checkpoint of a few KB whose entry inflates to 64 MB: the variable's shape is
    (2, 3), so the entry is refused from its header, allocating well under 4 MB."""
    import tracemalloc
    path = tmp_path / "big.npz"
    _inflating_checkpoint(path, "w", (4096, 4096))
    assert os.path.getsize(path) < 256 * 1024
    w = df.Variable(np.ones((2, 3), np.float32), name="w")
    tracemalloc.start()
    try:
        with pytest.raises(df.errors.InvalidArgumentError,
                           match=r"entry 'w' .* is float32\[4096, 4096\], the variable is float32\[2, 3\]"):
            df.restore_variables(path, [w])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20
    np.testing.assert_array_equal(w.numpy(), np.ones((2, 3)))
    small = tmp_path / "small.npz"           # the same writer, the right shape: restored
    _inflating_checkpoint(small, "w", (2, 3))
    df.restore_variables(small, [w])
    np.testing.assert_array_equal(w.numpy(), np.zeros((2, 3)))
