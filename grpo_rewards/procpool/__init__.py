"""One process pool for everything that must run under a killing time limit: the math workers
and the local sandbox (which adds its isolation layers in each worker and each run)."""

from grpo_rewards.procpool.pool import Program, TaskResult, WorkerPool, platform_gap
from grpo_rewards.procpool.zygote import SoftTimeout

__all__ = ["Program", "SoftTimeout", "TaskResult", "WorkerPool", "platform_gap"]
