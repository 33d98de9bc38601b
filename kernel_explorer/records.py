"""Every record type a measurement yields, importable from one public place, with the `Verdict` they carry.

The definitions live in `measure/records.py` beside the measurements that fill them; this module is
their public name, so `from kernel_explorer.records import LayerVerdict` keeps working whatever moves
below it.
"""

from kernel_explorer.measure.records import (
    VALUE_TYPES,
    CompileTime,
    GradientDivergence,
    KernelsBenchmark,
    LayerCalibration,
    LayerDeterminism,
    LayerDivergence,
    LayerLatency,
    LayerVerdict,
    ModelAgreement,
    ModelDecode,
    ModelPair,
    ModelPrefill,
    ModelThroughput,
    ModelVerdict,
    Provenance,
    Record,
    RunEvent,
    TimeShare,
    TrainingAgreement,
    Values,
)
from kernel_explorer.measure.verdict import Verdict

__all__ = [
    "VALUE_TYPES",
    "CompileTime",
    "GradientDivergence",
    "KernelsBenchmark",
    "LayerCalibration",
    "LayerDeterminism",
    "LayerDivergence",
    "LayerLatency",
    "LayerVerdict",
    "ModelAgreement",
    "ModelDecode",
    "ModelPair",
    "ModelPrefill",
    "ModelThroughput",
    "ModelVerdict",
    "Provenance",
    "Record",
    "RunEvent",
    "TimeShare",
    "TrainingAgreement",
    "Values",
    "Verdict",
]
