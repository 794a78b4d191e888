"""`python -m defun ...`: the `defun` command (defun/cli.py)."""
import sys

from defun.cli import main

sys.exit(main())
