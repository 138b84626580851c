"""The reward server: one validated spec served over HTTP (`grpo-rewards serve`).

Needs the `serve` extra (FastAPI + uvicorn): `pip install 'grpo-rewards[serve]'`.
"""

from grpo_rewards.serve.app import ServerSettings, create_app
from grpo_rewards.serve.run import serve

__all__ = ["ServerSettings", "create_app", "serve"]
