"""Worker-side functions for tests/test_procpool.py: standard library only, so that an isolated
pool (python -I, no project on its path) can import them from the tests directory."""

import os
import sys

SLOT = None  # (slot, args) given to this worker's set-up
REPLIES = 0  # results that have gone out from this worker
END_AFTER_REPLY = False  # set by a task: the work after its reply ends the worker


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


def end_after_reply():
    """A task whose reply goes out before its worker ends (in `end_if_asked`)."""
    global END_AFTER_REPLY
    END_AFTER_REPLY = True
    return "asked"


def end_if_asked():
    if END_AFTER_REPLY:
        os._exit(3)


def end_at_once(slot, args):
    os._exit(4)
