"""Test-wide settings. The library is imported as installed (`pip install -e .`), as
`defun`, `defun.runtime` and `defun.graph`; nothing here changes `sys.path`."""
