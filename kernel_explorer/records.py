"""The results, importable from one public place: every record type a measurement yields, the log
that holds them, and the verdicts, intervals and machine notes read from them.

The definitions live in `measure/` beside the measurements that fill them; this module is their
public name, so `from kernel_explorer.records import LayerVerdict` keeps working whatever moves
below it, and the views (which import only the face) read results through it.

May import: measure
"""

from kernel_explorer.measure.breakdown import EMBEDDING, LINEAR, REST
from kernel_explorer.measure.comparison import Comparison
from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.merge import revision_notes, run_machines
from kernel_explorer.measure.records import (
    INFERENCE,
    TRAINING,
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
from kernel_explorer.measure.stats import (
    MIN_PAIRS,
    Interval,
    NoisyMachineWarning,
    noise_warning,
    speed_verdict,
)
from kernel_explorer.measure.verdict import Verdict, describe

__all__ = [
    "EMBEDDING",
    "INFERENCE",
    "LINEAR",
    "MIN_PAIRS",
    "REST",
    "TRAINING",
    "VALUE_TYPES",
    "Comparison",
    "CompileTime",
    "GradientDivergence",
    "Interval",
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
    "NoisyMachineWarning",
    "Provenance",
    "Record",
    "ResultLog",
    "RunEvent",
    "TimeShare",
    "TrainingAgreement",
    "Values",
    "Verdict",
    "describe",
    "noise_warning",
    "revision_notes",
    "run_machines",
    "speed_verdict",
]
