"""`python -m defun ...`: the `defun` command (defun/cli.py)."""
import sys

from defun.cli import main

if __name__ == "__main__":     # importing the module (a docs tool does) runs nothing
    sys.exit(main())
