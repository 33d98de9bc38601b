"""The results, importable from one public place: every record type a measurement yields, the log
that holds them, the kinds of measurement and their summaries, and the verdicts, intervals and
machine notes read from them.

The value classes belong to the kinds of measurement (`measure/kinds/`); this module is their
public name, derived from the kinds' registry, so `from kernel_explorer.records import LayerVerdict`
keeps working whatever moves below it, a new kind's records are here without an edit, and the
views (which import only the face) read results through it.

May import: measure
"""

from kernel_explorer.measure.comparison import Comparison
from kernel_explorer.measure.kinds import Kind, kind, kinds, kinds_in_run, measured_by_compare, value_types
from kernel_explorer.measure.kinds.benchmark import KernelsBenchmark
from kernel_explorer.measure.kinds.breakdown import EMBEDDING, LINEAR, REST, TimeShare, covered_line
from kernel_explorer.measure.kinds.memory import (
    AttentionMemory,
    LayerMemory,
    ModelPrefillMemory,
    ModelWeights,
)
from kernel_explorer.measure.kinds.model.records import (
    CompileTime,
    ModelDecode,
    ModelPair,
    ModelPrefill,
    ModelThroughput,
    ModelVerdict,
    TrainingAgreement,
)
from kernel_explorer.measure.kinds.outputs import ModelAgreement
from kernel_explorer.measure.kinds.time import kernels_running, latest_verdict_records
from kernel_explorer.measure.kinds.time.records import LayerCalibration, LayerLatency, LayerVerdict
from kernel_explorer.measure.kinds.values.records import GradientDivergence, LayerDeterminism, LayerDivergence
from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.merge import revision_notes, run_machines
from kernel_explorer.measure.records import (
    INFERENCE,
    TRAINING,
    VALUE_TYPES,
    Provenance,
    Record,
    RunEvent,
    Values,
)
from kernel_explorer.measure.stats import (
    MIN_PAIRS,
    Interval,
    NoisyMachineWarning,
    noise_warning,
    speed_verdict,
)
from kernel_explorer.measure.summary import (
    Column,
    IntervalCell,
    NumberCell,
    Summary,
    format_interval,
    format_number,
)
from kernel_explorer.measure.verdict import Verdict, describe

# the classes above are named for readers and type checkers; a kind added since is here all the same
# the record classes are named above for readers and type checkers; a kind added since is here all
# the same, derived from the registry
_REGISTERED = {cls.__name__: cls for cls in value_types().values()}
globals().update(_REGISTERED)

__all__ = [
    "EMBEDDING",
    "INFERENCE",
    "LINEAR",
    "MIN_PAIRS",
    "REST",
    "TRAINING",
    "AttentionMemory",
    "Column",
    "Comparison",
    "CompileTime",
    "GradientDivergence",
    "Interval",
    "IntervalCell",
    "KernelsBenchmark",
    "Kind",
    "LayerCalibration",
    "LayerDeterminism",
    "LayerDivergence",
    "LayerLatency",
    "LayerMemory",
    "LayerVerdict",
    "ModelAgreement",
    "ModelDecode",
    "ModelPair",
    "ModelPrefill",
    "ModelPrefillMemory",
    "ModelThroughput",
    "ModelVerdict",
    "ModelWeights",
    "NoisyMachineWarning",
    "NumberCell",
    "Provenance",
    "Record",
    "ResultLog",
    "RunEvent",
    "Summary",
    "TimeShare",
    "TrainingAgreement",
    "Verdict",
    "covered_line",
    "describe",
    "format_interval",
    "format_number",
    "kernels_running",
    "kind",
    "kinds",
    "kinds_in_run",
    "latest_verdict_records",
    "measured_by_compare",
    "noise_warning",
    "revision_notes",
    "run_machines",
    "speed_verdict",
]
__all__ += [
    "VALUE_TYPES",
    "Values",
    *sorted(set(_REGISTERED) - set(__all__)),
]  # the table, the union, every kind's classes
