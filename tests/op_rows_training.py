"""Op rows of the training pieces: the scatter variable ops (stateful: tested on their own)."""

ROWS = []

EXCLUDED = {
    "scatter_add_variable": "stateful; tests/test_scatter_variables.py",
    "scatter_sub_variable": "stateful; tests/test_scatter_variables.py",
    "scatter_update_variable": "stateful; tests/test_scatter_variables.py",
}
