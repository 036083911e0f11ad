"""The property checks that stand in for value comparison on random backend tests
(onnx_backend_runner.RANDOM_CHECKS): each accepts a correct draw and rejects outputs
that break the property."""

import numpy as np

from onnx_backend_runner import check_random_outputs

rng = np.random.default_rng(0)


def test_bernoulli_check():
    p = rng.uniform(size=4000)
    good = (rng.uniform(size=p.size) < p).astype(np.float64)
    assert check_random_outputs("bernoulli", [p], [good], [good]) is None
    assert "0 and 1" in check_random_outputs("bernoulli", [p], [good], [good * 2])
    # Ones drawn with probability 1 - p instead of p: the count strays.
    high = np.full(4000, 0.9)
    inverted = (rng.uniform(size=high.size) < 1 - high).astype(np.float64)
    assert "count" in check_random_outputs("bernoulli", [high], [inverted], [inverted])
    assert "float32" in check_random_outputs("bernoulli", [p], [good], [good.astype(np.float32)])
    edge = np.array([0.0, 1.0])
    assert "p = 0" in check_random_outputs("bernoulli", [edge], [edge], [np.array([1.0, 1.0])])


def test_dropout_check():
    x = rng.standard_normal(10_000).astype(np.float32)
    ratio = np.array(0.25, np.float32)
    mask = rng.uniform(size=x.size) >= 0.25
    y = np.where(mask, x / np.float32(0.75), 0).astype(np.float32)
    assert check_random_outputs("dropout", [x, ratio, np.array(True)], [y, mask], [y, mask]) is None
    assert check_random_outputs("dropout", [x, ratio, np.array(True)], [y], [y]) is None
    assert "neither" in check_random_outputs("dropout", [x, ratio, np.array(True)], [y], [y * 2])
    assert "mask" in check_random_outputs("dropout", [x, ratio, np.array(True)], [y, mask], [y, ~mask])
    kept_all = (x / np.float32(0.75)).astype(np.float32)
    assert "count" in check_random_outputs("dropout", [x, ratio, np.array(True)], [y], [kept_all])
