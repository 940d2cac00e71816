"""Errors that mean "the user's input is wrong": the CLI prints their one-line message and exits 2."""


class InputError(ValueError):
    """Bad user input (config, data, model path); the message names the field and the fix."""


class TrainingDiverged(InputError):
    """A loss, gradient, weight or log-probability became non-finite; the message names the agent, the step
    and the phase (rollout, update or eval). Usually a learning rate that is too high: a config fix."""


class DamagedCheckpoint(InputError):
    """A checkpoint file that cannot be read; the message names the file."""
