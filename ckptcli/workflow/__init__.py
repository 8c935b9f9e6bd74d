"""Durable steps for plain Python workflows, with compensations (the saga pattern).

    from ckptcli import workflow

    @workflow.step(retry=workflow.Retry(max_attempts=5))
    def charge(order: str, cents: int) -> dict:
        key = workflow.current_step().idempotency_key   # pass it to the payment API
        ...

    def checkout(ctx: workflow.Context, order: str) -> str:
        receipt = charge(order, 1299)                   # recorded; a re-run returns it
        ctx.set("charged", receipt["id"])               # a workflow variable
        ctx.step("ship", ship, order)                   # the same, without a decorator
        return "shipped"

    workflow.run(store, "order-1042", checkout, "A-1042")

A re-run after a crash returns the recorded results of completed steps without calling
them and goes on at the first unfinished one; `rollback` runs the compensations of the
steps after a checkpoint. The guide is docs/workflows.md; what is recorded,
ckptcli/workflow/events.py.
"""

from ckptcli.workflow.core import (
    Compensation,
    Context,
    InDoubtStep,
    NonDeterminismError,
    Resolved,
    Retry,
    StepFailed,
    StepInDoubt,
    StepInfo,
    WorkflowError,
    WorkflowFailed,
    current_step,
    default_durability,
    run,
    step,
)
from ckptcli.workflow.inspect import (
    CompensationFailed,
    PlannedCompensation,
    RollbackPlan,
    StepView,
    WorkflowStatus,
    list_workflows,
    rollback,
    status,
)

__all__ = [
    "Compensation",
    "CompensationFailed",
    "Context",
    "InDoubtStep",
    "NonDeterminismError",
    "PlannedCompensation",
    "Resolved",
    "Retry",
    "RollbackPlan",
    "StepFailed",
    "StepInDoubt",
    "StepInfo",
    "StepView",
    "WorkflowError",
    "WorkflowFailed",
    "WorkflowStatus",
    "current_step",
    "default_durability",
    "list_workflows",
    "rollback",
    "run",
    "status",
    "step",
]
