"""One comparison of JSON values for every "did it change": by type and value."""

import pytest

from admission.core.base.jsonvalues import MAX_STEPS, same


@pytest.mark.parametrize(
    "a, b",
    [
        (False, 0),
        (True, 1),
        (1, 1.0),
        (0, -0.0),
        (0.0, -0.0),
        ("1", 1),
        (None, False),
        ([], {}),
        ([1, 2], [2, 1]),
        ({"a": 1}, {"a": 1, "b": None}),
        ([{"a": [True]}], [{"a": [1]}]),
        ({"a": {"b": 0.0}}, {"a": {"b": -0.0}}),
    ],
)
def test_values_of_another_type_or_sign_are_not_the_same(a, b):
    assert not same(a, b) and not same(b, a)


@pytest.mark.parametrize(
    "a, b",
    [
        (0, 0),
        (-0.0, -0.0),
        (True, True),
        (None, None),
        ("x", "x"),
        (1.5, 1.5),
        ({"a": 1, "b": [1, {"c": False}]}, {"b": [1, {"c": False}], "a": 1}),
    ],
)
def test_the_same_values_are_the_same_whatever_the_key_order(a, b):
    assert same(a, b) and same(b, a)


def test_a_comparison_too_costly_to_settle_counts_as_a_change():
    # == and marshal tell these apart only by key order, so each key is walked: too many to settle.
    assert same([{"k": 1, "j": 0}], [{"j": 0, "k": 1}])
    many = [{"k": i, "j": 0} for i in range(MAX_STEPS)]
    swapped = [{"j": 0, "k": i} for i in range(MAX_STEPS)]
    assert not same(many, swapped)
