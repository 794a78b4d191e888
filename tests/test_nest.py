import collections

from defun.runtime.nest import flatten, make_packer, pack_as

Pair = collections.namedtuple("Pair", "a b")


def test_make_packer_matches_pack_as():
    structure = (1, [2, {"z": 3, "a": Pair(4, 5)}], (6,), None)
    leaves = flatten(structure)
    values = [f"v{i}" for i in range(len(leaves))]
    expected = pack_as(structure, values)
    got = make_packer(structure, list(range(len(leaves))))(values)
    assert got == expected
    assert type(got[1][1]["a"]) is Pair and type(got[2]) is tuple


def test_make_packer_constants_and_order():
    structure = {"b": 0, "a": [0, 0]}
    pack = make_packer(structure, [2, ("const", None), 0])   # flatten order: a[0], a[1], b
    assert pack(["x", "y", "z"]) == {"a": ["z", None], "b": "x"}


def test_make_packer_single_leaf_and_dict_keys_are_data():
    assert make_packer("leaf", [0])(["x"]) == "x"
    key = "__import__('os')"
    assert make_packer({key: 0}, [0])([1]) == {key: 1}
