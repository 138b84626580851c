"""Worker-side functions for tests/test_procpool.py: standard library only, so that an isolated
pool (python -I, no project on its path) can import them from the tests directory."""

import sys

SLOT = None  # (slot, args) given to this worker's set-up
REPLIES = 0  # results that have gone out from this worker


def remember_slot(slot, args):
    global SLOT
    SLOT = (slot, args)


def refuse(slot, args):
    raise ValueError(f"slot {slot} refuses")


def count_reply():
    global REPLIES
    REPLIES += 1


def evaluate(expression):
    """The expression's value, with this module's globals and `sys` in scope."""
    return eval(expression, {**globals(), "sys": sys})
