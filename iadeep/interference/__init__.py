"""Interference model: measured co-location throughputs, memory estimates and an online learner.

Public front of the package; see the private modules for formulas and sources.
"""

from iadeep.interference._gavel import GPU_TYPES, GavelMeasurements
from iadeep.interference._memory import MEMORY_MODEL_GIB, agreement_with_measurements, memory_gib
from iadeep.interference._model import InterferenceModel, UnknownJobType
from iadeep.interference._zero import without_interference
from iadeep.interference._online import HoldoutReport, InterferenceSample, OnlineInterferenceLearner, evaluate_holdout

__all__ = [
    "GPU_TYPES",
    "GavelMeasurements",
    "HoldoutReport",
    "InterferenceModel",
    "InterferenceSample",
    "MEMORY_MODEL_GIB",
    "OnlineInterferenceLearner",
    "UnknownJobType",
    "agreement_with_measurements",
    "evaluate_holdout",
    "memory_gib",
    "without_interference",
]
