"""A tiny calculator with a bug for the agent to fix."""


def add(a, b):
    return a - b


def multiply(a, b):
    return a * b
