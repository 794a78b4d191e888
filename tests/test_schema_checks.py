"""The document's primitive checks of one value (graph/serialize/schema.py): each refuses a
value of another type, or one past its limit, with a GraphFormatError naming the place."""
import pytest

import defun as df
from defun.graph.serialize.schema import check_int, check_list, check_name, check_str


@pytest.mark.parametrize("check, value, message", [
    (lambda x: check_str(x, "doc.name", 5), ["a"], "doc.name: expected str, got list"),
    (lambda x: check_str(x, "doc.name", 5), "abcdef", "doc.name: string longer than 5 characters"),
    (lambda x: check_list(x, "doc.nodes", 2), "ab", "doc.nodes: expected list, got str"),
    (lambda x: check_list(x, "doc.nodes", 2), [1, 2, 3], "doc.nodes: 3 items, more than the limit of 2"),
    (lambda x: check_int(x, "doc.k", 0, 3), True, "doc.k: expected int, got bool"),
    (lambda x: check_int(x, "doc.k", 0, 3), 4, "doc.k: 4 is out of range [0, 3]"),
    (lambda x: check_name(x, "doc.f"), "1f", "doc.f: '1f' is not a valid name"),
])
def test_a_value_of_another_type_or_past_its_limit_is_refused(check, value, message):
    with pytest.raises(df.errors.GraphFormatError) as caught:
        check(value)
    assert message in str(caught.value)


def test_a_value_within_its_limit_is_returned_as_it_is():
    assert check_str("abcde", "p", 5) == "abcde" and check_list([1, 2], "p", 2) == [1, 2]
    assert check_int(3, "p", 0, 3) == 3 and check_name("f_1.a/b-c", "p") == "f_1.a/b-c"
