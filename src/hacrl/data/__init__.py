"""Built-in tasks and data sources. Import-light: only the standard library is loaded here."""

from hacrl.data.tasks import TASKS, ArithmeticTask, Problem, Task, exact_match, get_task

__all__ = ["TASKS", "ArithmeticTask", "Problem", "Task", "exact_match", "get_task"]
