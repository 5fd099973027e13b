"""Workload mixes: deterministic per seed, independent of row order, frequencies match weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from iadeep.jobtypes import MEASURED_BATCH_SIZES, JobType
from iadeep.traces import IADEEP_MIX_TABLE, MIXES, assign_mix, load_trace, mix_probabilities


def ids(n: int) -> pd.DataFrame:
    return pd.DataFrame({"job_id": [f"job-{i}" for i in range(n)]})


def test_iadeep_table_is_the_documented_mapping() -> None:
    table = {e.app: (e.weight, e.model) for e in IADEEP_MIX_TABLE}
    assert table == {
        "vgg16": (0.14, "ResNet-50"),
        "resnet50": (0.14, "ResNet-50"),
        "squeezenet": (0.14, "ResNet-18"),
        "neumf": (0.12, "Recommendation"),
        "lstm": (0.12, "LM"),
    }
    for e in IADEEP_MIX_TABLE:
        assert e.batch_sizes == MEASURED_BATCH_SIZES[e.model]
    np.testing.assert_allclose(MIXES["iadeep"].probabilities.sum(), 1.0)


def test_gavel_mix_has_the_26_job_types() -> None:
    probs = mix_probabilities("gavel")
    assert len(probs) == 26
    np.testing.assert_allclose(list(probs.values()), 1 / 26)
    for app, model, bs in probs:
        assert app == model
        assert bs in MEASURED_BATCH_SIZES[model]
    assert ("A3C", "A3C", 1) in probs and ("CycleGAN", "CycleGAN", 1) in probs


def test_deterministic_per_seed_and_different_across_seeds() -> None:
    t = ids(5000)
    a = assign_mix(t, "iadeep", seed=7)
    b = assign_mix(t, "iadeep", seed=7)
    c = assign_mix(t, "iadeep", seed=8)
    pd.testing.assert_frame_equal(a, b)
    differ = (a["app"] != c["app"]) | (a["batch_size"] != c["batch_size"])
    assert differ.mean() > 0.5


def test_independent_of_row_order_and_of_other_rows() -> None:
    t = ids(3000)
    a = assign_mix(t, "gavel", seed=3).set_index("job_id")
    shuffled = t.sample(frac=1.0, random_state=1).reset_index(drop=True)
    b = assign_mix(shuffled, "gavel", seed=3).set_index("job_id")
    pd.testing.assert_frame_equal(a, b.loc[a.index])
    sub = assign_mix(t.iloc[1000:1100], "gavel", seed=3).set_index("job_id")
    pd.testing.assert_frame_equal(sub, a.loc[sub.index])


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_frequencies_match_the_weights(mix: str) -> None:
    n = 200_000
    df = assign_mix(ids(n), mix, seed=0)
    got = df.groupby(["app", "model", "batch_size"]).size() / n
    want = mix_probabilities(mix)
    assert set(got.index) == set(want)
    for key, p in want.items():
        sd = np.sqrt(p * (1 - p) / n)
        assert abs(got[key] - p) < 5 * sd, (key, got[key], p)
    # Every assignment is a measured Gavel job type.
    for m, bs in set(zip(df["model"], df["batch_size"])):
        JobType(m, int(bs))
        assert bs in MEASURED_BATCH_SIZES[m]


def test_iadeep_app_shares(philly_full: pd.DataFrame) -> None:
    share = philly_full["app"].value_counts(normalize=True)
    for e in IADEEP_MIX_TABLE:
        assert share[e.app] == pytest.approx(e.weight / 0.66, abs=0.01)


def test_load_trace_seed_and_mix_options(philly_json: Path) -> None:
    a = load_trace("philly-json", philly_json, seed=1)
    b = load_trace("philly-json", philly_json, seed=1)
    g = load_trace("philly-json", philly_json, mix="gavel", seed=1)
    pd.testing.assert_frame_equal(a, b)
    assert set(g["app"]) <= set(MEASURED_BATCH_SIZES)
    assert g.attrs["mix"] == "gavel" and g.attrs["seed"] == 1
    with pytest.raises(ValueError, match="unknown workload mix"):
        load_trace("philly-json", philly_json, mix="nope")
