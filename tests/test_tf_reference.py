"""The runner of TensorFlow's own AutoGraph reference tests (tests/tf_reference).

TF's files are not in this repository: set DEFUN_TF_AUTOGRAPH_TESTS to the directory that
holds them (tensorflow/python/autograph/tests: *_test.py and reference_test_base.py) to run
each file here, as `python -m tests.tf_reference DIR` does; without it those tests are not
collected. The runner itself is checked on a small file in TF's style written here.
"""
import os
import textwrap

import pytest

from tests.tf_reference import runner

TF_DIR = os.environ.get("DEFUN_TF_AUTOGRAPH_TESTS")
TF_FILES = sorted(f for f in os.listdir(TF_DIR) if f.endswith("_test.py")) if TF_DIR else []

BASE = '''
import tensorflow as tf


class TestCase(tf.test.TestCase):
    def assertFunctionMatchesEager(self, f, *args):
        self.assertAllEqual(tf.function(f)(*args), f(*args))
'''

STYLE = '''
from absl.testing import parameterized
import tensorflow as tf

from tensorflow.python.autograph.tests import reference_test_base


def clipped(x):
    if x > 2:
        x = 2 * x
    return x


def summed(n):
    s = 0
    for i in tf.range(n):
        s = s + i
    return s


class ReferenceTest(reference_test_base.TestCase, parameterized.TestCase):

    @parameterized.parameters((1,), (3,))
    def test_clipped(self, x):
        self.assertFunctionMatchesEager(clipped, tf.constant(x))

    @parameterized.parameters(0, 4)
    def test_summed(self, n):
        self.assertFunctionMatchesEager(summed, n)

    def test_wrong(self):
        self.assertAllEqual(tf.function(summed)(3), 4)

    def test_raises(self):
        raise KeyError("not found")

    def test_dataset(self):
        tf.function(summed)(tf.data.Dataset.range(3))

    def test_skipped(self):
        self.skipTest("as TF's files skip")
'''


def test_the_runner_counts_each_outcome(tmp_path):
    (tmp_path / "reference_test_base.py").write_text(textwrap.dedent(BASE))
    (tmp_path / "style_test.py").write_text(textwrap.dedent(STYLE))
    lines = []
    rows = runner.run_dir(str(tmp_path), write=lines.append)["style_test.py"]
    kinds = {test.split(".")[-1]: kind for test, kind, _ in rows}
    assert kinds == {"test_clipped0": "passed", "test_clipped1": "passed", "test_summed0": "passed",
                     "test_summed1": "passed", "test_wrong": "failed", "test_raises": "errors",
                     "test_dataset": "tf_only", "test_skipped": "skipped"}
    assert any("tf.data.Dataset.range: TF's input pipelines" in line for line in lines)
    assert any(line.split()[1:] == ["4", "1", "1", "1", "1"] for line in lines if line.startswith("TOTAL"))


def test_a_file_that_does_not_import_is_one_error(tmp_path):
    (tmp_path / "reference_test_base.py").write_text(textwrap.dedent(BASE))
    (tmp_path / "broken_test.py").write_text("import tensorflow as tf\ntf.no_such_name\n")
    rows = runner.run_dir(str(tmp_path), write=lambda line: None)["broken_test.py"]
    assert [r[:2] for r in rows] == [["<import>", "errors"]] and "no_such_name" in rows[0][2]


if TF_FILES:       # one test per TF file, when DEFUN_TF_AUTOGRAPH_TESTS names their directory
    @pytest.mark.parametrize("name", TF_FILES)
    def test_tensorflow_reference_file(name):
        rows = runner.run_file(os.path.join(TF_DIR, name), timeout=30)
        bad = [f"{kind}: {test}: {why}" for test, kind, why in rows if kind in ("failed", "errors")]
        assert not bad, f"{len(bad)} of {len(rows)} tests of {name}:\n" + "\n".join(bad)
