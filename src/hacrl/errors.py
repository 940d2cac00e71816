"""Errors that mean "the user's input is wrong": the CLI prints their one-line message and exits 2."""


class InputError(ValueError):
    """Bad user input (config, data, model path); the message names the field and the fix."""
