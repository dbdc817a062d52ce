"""fusee: embeddable durable execution for Python, at the speed of the disk."""

from fusee_runtime.children import ChildHandle
from fusee_runtime.client import Client, ClientHandle, ConnectionLost
from fusee_runtime.clock import Clock, FakeClock, SystemClock
from fusee_runtime.completions import Completion
from fusee_runtime.context import Ctx
from fusee_runtime.dsl import Exhausted, Rate, RetryPolicy, StepDef, WorkflowDef, step, workflow
from fusee_runtime.engine.config import Config
from fusee_runtime.engine.engine import Engine
from fusee_runtime.engine.handle import RunHandle
from fusee_runtime.engine.limits import LimitInfo
from fusee_runtime.engine.queues import QueueInfo
from fusee_runtime.errors import (
    Cancelled,
    ChildFailed,
    CodecError,
    EngineClosed,
    Failure,
    Fatal,
    FuseeError,
    HomeLocked,
    HomeUnsafe,
    JournalCorrupt,
    JournalFailed,
    NonDeterminism,
    NotFound,
    Rejected,
    RunFailed,
    StepFailed,
    StoreUnavailable,
    Terminated,
    TimedOut,
    UpdatePending,
)
from fusee_runtime.model.run import RunInfo, Status
from fusee_runtime.objects import handler, object
from fusee_runtime.scope import current_ctx
from fusee_runtime.streams import StepStreamWriter, StreamWriter

__all__ = [
    "Cancelled",
    "ChildFailed",
    "ChildHandle",
    "Client",
    "ClientHandle",
    "Clock",
    "CodecError",
    "Completion",
    "Config",
    "ConnectionLost",
    "Ctx",
    "Engine",
    "EngineClosed",
    "Exhausted",
    "Failure",
    "FakeClock",
    "Fatal",
    "FuseeError",
    "HomeLocked",
    "HomeUnsafe",
    "JournalCorrupt",
    "JournalFailed",
    "LimitInfo",
    "NonDeterminism",
    "NotFound",
    "QueueInfo",
    "Rate",
    "Rejected",
    "RetryPolicy",
    "RunFailed",
    "RunHandle",
    "RunInfo",
    "Status",
    "StepDef",
    "StepFailed",
    "StepStreamWriter",
    "StoreUnavailable",
    "StreamWriter",
    "SystemClock",
    "Terminated",
    "TimedOut",
    "UpdatePending",
    "WorkflowDef",
    "current_ctx",
    "handler",
    "object",
    "step",
    "workflow",
]
