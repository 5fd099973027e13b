"""The column-wise row reductions of the policy core equal numpy's ``axis=1`` reductions."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from iadeep.policy._rows import row_any, row_count, row_max, row_prod

shapes = st.tuples(st.integers(0, 50), st.integers(1, 5))


@given(arrays(np.bool_, shapes))
def test_any_and_count(a):
    np.testing.assert_array_equal(row_any(a), a.any(axis=1))
    np.testing.assert_array_equal(row_count(a), a.sum(axis=1))


@given(arrays(np.float64, shapes, elements=st.floats(-1e3, 1e3)))
def test_prod_and_max(a):
    np.testing.assert_allclose(row_prod(a), np.prod(a, axis=1), rtol=1e-12)
    np.testing.assert_array_equal(row_max(a), a.max(axis=1))
    if a.shape[1] <= 2:
        np.testing.assert_array_equal(row_prod(a), np.prod(a, axis=1))  # bit-identical


def test_no_columns():
    a = np.zeros((3, 0), dtype=bool)
    assert row_any(a).tolist() == [False] * 3 and row_count(a).tolist() == [0] * 3
    assert row_prod(np.zeros((3, 0))).tolist() == [1.0] * 3
