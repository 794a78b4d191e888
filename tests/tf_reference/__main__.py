"""python -m tests.tf_reference DIR: see tests/tf_reference/runner.py."""
import sys

from tests.tf_reference.runner import main

sys.exit(main())
