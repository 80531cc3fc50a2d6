"""MiniWoB++ in a real browser: the benchmark's pages served as shipped, played with the browser tools."""

from toolgym.plugins.miniwob.env import MINIWOB_TOOLS, MiniWoBEnv
from toolgym.plugins.miniwob.tasks import UNSUPPORTED, supported_tasks, task_list

__all__ = ["MINIWOB_TOOLS", "UNSUPPORTED", "MiniWoBEnv", "supported_tasks", "task_list"]
