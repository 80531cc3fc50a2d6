"""The trajectory schema. Defined in ``toolgym.core.trajectory`` (the engine produces it and core
must not depend on this package); re-exported here, where stores, exports and the verifier live."""

from toolgym.core.trajectory import (
    SCHEMA_VERSION,
    LLMCall,
    Segment,
    Status,
    Step,
    Timings,
    ToolCallRecord,
    Trajectory,
    prompt_digest,
)

__all__ = [
    "SCHEMA_VERSION",
    "LLMCall",
    "Segment",
    "Status",
    "Step",
    "Timings",
    "ToolCallRecord",
    "Trajectory",
    "prompt_digest",
]
