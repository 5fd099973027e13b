"""Online interference learner: predicts pairwise normalised throughput from observed samples.

Observations are (co-location, configuration, measured normalised throughput) samples, e.g. from
tuning sessions. The prediction for job type ``i`` sharing with type ``j`` combines

1. a ridge regression over pair features (model family of each side, their product, and each
   side's log2 batch size), fitted by accumulating sufficient statistics (``X^T X``, ``X^T y``),
   so each observation costs ``O(d^2)`` with ``d`` features; it generalises to unseen pairs;
2. a per-pair shrinkage towards the pair's own observed mean:
   ``pred = ridge + n_ij / (n_ij + k) * (mean_ij - ridge)`` with ``k = shrinkage`` samples.

Before any sample it predicts ``prior_mean`` (default 0.655: half the mean pair sum 1.31 measured
over feasible Gavel V100 pairs, see shared WORKLOAD-NOTES). :func:`evaluate_holdout` reports its
error on held-out pairs against the measured truth.

Notations:
    n_types: number of job types; d: number of regression features.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

try:  # np.linalg.solve's own kernel (LAPACK gesv), without the wrapper's checks and copies
    from numpy.linalg._umath_linalg import solve1 as _solve
except ImportError:  # a numpy without the private module: the public function, the same kernel
    _solve = np.linalg.solve


from iadeep.jobtypes import JobType

__all__ = ["InterferenceSample", "OnlineInterferenceLearner", "HoldoutReport", "evaluate_holdout"]


@dataclass(frozen=True)
class InterferenceSample:
    """One observation: ``job`` ran at ``normalised_throughput`` while sharing with ``partner``.

    Attributes:
        job: the observed job's type (model and the batch size it ran at).
        partner: the co-located job's type.
        normalised_throughput: observed steps/s divided by isolated steps/s (dimensionless).
    """

    job: JobType
    partner: JobType
    normalised_throughput: float


class OnlineInterferenceLearner:
    """Learns pairwise normalised throughputs from samples; not thread-safe.

    Args:
        types: the job types to predict for, shape ``(n_types,)``.
        ridge: L2 penalty of the regression (in units of samples).
        shrinkage: samples of a pair after which its own mean carries half the weight.
        prior_mean: prediction before any sample.
    """

    def __init__(self, types: Iterable[JobType], *, ridge: float = 1.0, shrinkage: float = 2.0, prior_mean: float = 0.655):
        self.types = tuple(types)
        self._ids = {t: i for i, t in enumerate(self.types)}
        # id() of each of our own type objects (alive as long as the learner: an id found here is
        # that very object) -> its index: a sample built from these objects skips their hashing
        self._by_id = {id(t): i for i, t in enumerate(self.types)}
        families = sorted({t.model for t in self.types})
        self._fam = {f: k for k, f in enumerate(families)}
        nf = len(families)
        self._d = 1 + 2 * nf + nf * nf + 2
        self._feat = np.stack([[self._features(a, b) for b in self.types] for a in self.types])  # (n, n, d)
        d = self._d
        # X^T X and X^T y in one buffer, so that a sample adds to both in one indexed operation
        self._sums = np.zeros(d * d + d)
        self._xtx = self._sums[:d * d].reshape(d, d)  # views of it
        self._xty = self._sums[d * d:]
        self._xtx[:] = ridge * np.eye(d)
        self._xty[0] = ridge * prior_mean  # ridge pulls the intercept towards the prior, not to 0
        self._xtx[0, 0] = ridge
        n = len(self.types)
        self._shrink = shrinkage
        # kept per pair as samples arrive (the same elementwise divisions matrix() made each time):
        # the pair's own mean where observed, its weight n / (n + shrinkage), whether observed
        self._own = np.zeros((n, n))
        self._weight = np.zeros((n, n))
        self._seen = np.zeros((n, n), dtype=bool)
        self._cache: np.ndarray | None = None
        self._xtx_flat = self._xtx.reshape(-1)  # the same memory, flat
        # per pair, built on first use: flat indices of x x^T's non-zero entries and their values;
        # those indices and the non-zero features' (offset to X^T y) in the buffer, the values to
        # add there (x x^T's, then x y's, written per sample), the x y part, the non-zero features'
        # values; the pair's sum of observations and their count (plain floats)
        self._sparse: dict[tuple[int, int], tuple] = {}
        self.n_samples = 0

    def _features(self, a: JobType, b: JobType) -> np.ndarray:
        nf = len(self._fam)
        x = np.zeros(self._d)
        x[0] = 1.0
        fa, fb = self._fam[a.model], self._fam[b.model]
        x[1 + fa] = 1.0
        x[1 + nf + fb] = 1.0
        x[1 + 2 * nf + fa * nf + fb] = 1.0
        x[-2] = np.log2(a.batch_size) / 8.0
        x[-1] = np.log2(b.batch_size) / 8.0
        return x

    def observe(self, sample: InterferenceSample) -> None:
        """Add one observation.

        Raises:
            KeyError: a job type outside ``types``.
        """
        by_id = self._by_id  # the learner's own type objects, found without hashing them
        i = by_id.get(id(sample.job))
        if i is None:
            i = self._ids[sample.job]
        j = by_id.get(id(sample.partner))
        if j is None:
            j = self._ids[sample.partner]
        self.observe_ids(i, j, sample.normalised_throughput)

    def observe_ids(self, i: int, j: int, normalised_throughput: float) -> None:
        """Add one observation given the two types' positions in ``types`` (job ``i`` ran at
        ``normalised_throughput`` while sharing with ``j``): :meth:`observe` without the sample
        object and the type lookups, for a caller that holds type ids (the policy core).

        Raises:
            IndexError: a position outside ``types``.
            ValueError: ``normalised_throughput`` is negative, NaN or infinite (nothing is learned:
                one such value would turn every prediction of the fit into NaN).
        """
        if not (0 <= i < len(self.types) and 0 <= j < len(self.types)):
            raise IndexError(f"type positions ({i}, {j}) outside 0..{len(self.types) - 1}")
        y = float(normalised_throughput)
        if not 0.0 <= y < math.inf:
            raise ValueError(f"normalised throughput must be finite and >= 0, got {y}")
        # x has at most 6 non-zero features (intercept, two families, their pair, two batch
        # sizes): only those entries of X^T X and X^T y change. Adding the same products to
        # them alone gives the same sums as adding the dense x x^T and x y (x + 0.0 == x; every
        # entry is >= +0), at a fraction of the memory traffic.
        entry = self._sparse.get((i, j))
        if entry is None:
            d = self._d
            x = self._feat[i, j]
            nz = np.flatnonzero(x)
            flat = (nz[:, None] * d + nz[None, :]).ravel()
            xx = np.outer(x, x).ravel()[flat]
            values = np.concatenate([xx, np.zeros(len(nz))])
            entry = self._sparse[(i, j)] = (flat, xx, np.concatenate([flat, d * d + nz]), values, values[len(flat):],
                                            x[nz], [0.0, 0.0])
        _, _, where, values, xy, xn, pair = entry
        # each index once: the same sums as adding x x^T to X^T X and x y to X^T y separately
        np.multiply(xn, y, out=xy)
        self._sums[where] += values
        total = pair[0] + y  # plain floats: the same IEEE operations as on arrays of sums and counts
        n = pair[1] + 1.0
        pair[0], pair[1] = total, n
        self._own[i, j] = total / n  # the pair's own mean and weight (total / n, the same bits as a division in matrix())
        self._weight[i, j] = n / (n + self._shrink)
        self._seen[i, j] = True
        self.n_samples += 1
        self._cache = None

    def observe_many(self, samples: Iterable[InterferenceSample]) -> None:
        """Add several observations."""
        for s in samples:
            self.observe(s)

    def matrix(self) -> np.ndarray:
        """Predicted normalised throughput for every ordered pair, shape ``(n_types, n_types)``, in [0, 1]."""
        if self._cache is None:
            # np.linalg.solve's kernel called directly: the same solution to the last bit (the
            # matrix is square, float64 and positive definite: the ridge term keeps it regular)
            w = _solve(self._xtx, self._xty)
            base = self._feat @ w
            own = np.where(self._seen, self._own, base)
            pred = base + self._weight * (own - base)
            self._cache = np.minimum(np.maximum(pred, 0.0, out=pred), 1.0, out=pred)  # np.clip's values, without its wrapper
            self._cache.setflags(write=False)
        return self._cache

    def predict(self, job: JobType, partner: JobType) -> float:
        """Predicted normalised throughput of ``job`` sharing with ``partner``."""
        return float(self.matrix()[self._ids[job], self._ids[partner]])


@dataclass(frozen=True)
class HoldoutReport:
    """Held-out error of the learner.

    Attributes:
        n_train_pairs / n_test_pairs: ordered pairs observed / held out.
        mae: mean absolute error of predictions on held-out pairs (normalised-throughput units).
        baseline_mae: the same for a constant prediction (the mean of the training observations).
    """

    n_train_pairs: int
    n_test_pairs: int
    mae: float
    baseline_mae: float


def evaluate_holdout(types: tuple[JobType, ...], truth: np.ndarray, fits: np.ndarray, *, train_fraction: float = 0.5,
                     samples_per_pair: int = 3, noise: float = 0.05, seed: int = 0) -> HoldoutReport:
    """Train on noisy samples of a random subset of feasible pairs, test on the rest.

    Args:
        types: job types, shape ``(n,)``.
        truth: true normalised throughputs, shape ``(n, n)``.
        fits: feasible pairs, shape ``(n, n)``.
        train_fraction: share of feasible ordered pairs used for training.
        samples_per_pair: noisy observations per training pair.
        noise: relative standard deviation of the multiplicative measurement noise.
        seed: RNG seed.
    """
    rng = np.random.default_rng(seed)
    pairs = np.argwhere(fits)
    rng.shuffle(pairs)
    n_train = int(round(train_fraction * len(pairs)))
    train, test = pairs[:n_train], pairs[n_train:]
    learner = OnlineInterferenceLearner(types)
    ys = []
    for i, j in train:
        for _ in range(samples_per_pair):
            y = truth[i, j] * rng.lognormal(0.0, noise)
            ys.append(y)
            learner.observe(InterferenceSample(types[i], types[j], y))
    pred = learner.matrix()
    t = truth[test[:, 0], test[:, 1]]
    p = pred[test[:, 0], test[:, 1]]
    return HoldoutReport(len(train), len(test), float(np.mean(np.abs(p - t))), float(np.mean(np.abs(np.mean(ys) - t))))
