"""Runs TensorFlow's own AutoGraph reference tests (tensorflow/python/autograph/tests/*_test.py,
kept OUTSIDE this repository) through a mapping of TensorFlow's names onto defun's:

    python -m tests.tf_reference /path/to/tf/autograph/tests

`tf_names` builds the `tensorflow` module the files import (tf.function -> df.defun,
tf.constant -> df.constant, ...); `runner` runs each file through unittest in its own process
and prints passed / failed / errors / skipped (by TF's file itself) / TF-only per file, then
the totals. A name of a TF-only feature (tf.data, tf.distribute, tf.SparseTensor, tf.ragged)
is mapped onto a stand-in that raises `NotMapped` when used; a test stopped by it counts as
"TF-only, not mapped" with the reason. Names only are mapped: no test is special-cased.
"""
