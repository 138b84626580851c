"""The program's process of `code_tests`: runs the candidate program and answers the tests'
process over the channel (fd 3), one request at a time. Runs as source after code_wire.py in the
sandbox; never imported by the project.

Nothing here is trusted by the tests' side: the program may replace any of it. What it sends
back is decoded there into plain data and handle numbers only, so the worst it can do is answer
with plain values of its choosing, which a program can do honestly too. Objects that are not
plain data stay here, in `_objects`, and cross as handle numbers.
"""

import linecache as _linecache
import operator as _operator
import os as _os
import pickle as _pickle
# The C modules, not signal's and socket's wrappers: a fresh process's first use of their enum
# conversions copies (copy-on-write) pages of its parent's.
import _signal
import _socket
import sys as _sys
import types as _types
from collections import UserList as _UserList
from collections import UserString as _UserString
from collections.abc import Mapping as _Mapping
from numbers import Integral as _Integral

_objects = {}  # handle number -> the object
_numbers = {}  # id(object) -> its handle number (objects are kept alive in _objects)
_busy = [False]  # inside the program's code: the time limit may interrupt it


def _on_alarm_while_busy(signum, frame):
    if _busy[0]:
        raise _Timeout()


def _truth_is_default(cls):
    return all("__bool__" not in vars(k) and "__len__" not in vars(k) for k in cls.__mro__[:-1])


def _stand_in(obj):
    """A Ref for `obj`, with the plain value that stands for it in comparisons where Python's
    own equality makes them equal: a builtin's subclass (an IntEnum, a namedtuple, an
    OrderedDict), a Mapping's items, a UserList's list, an Integral's int; an exception class
    by name (the tests' side makes a class for it)."""
    if isinstance(obj, type) and issubclass(obj, BaseException):
        return ExceptionClass(*_exception_names(obj))
    return _ref(obj, _plain_value(obj))


def _plain_value(obj):
    for base, copy in _BASES:
        if isinstance(obj, base):
            return copy(obj)
    if isinstance(obj, _Mapping):
        return dict(obj.items())
    if isinstance(obj, (_UserList, _UserString)):
        return obj.data
    if isinstance(obj, _Integral):
        return int(obj)
    return None


def _ref(obj, value):
    number = _numbers.get(id(obj))
    if number is None:
        number = len(_objects) + 1
        _objects[number], _numbers[id(obj)] = obj, number
    cls = type(obj)
    return Ref(number, getattr(cls, "__qualname__", "object"), _truth_is_default(cls), value)


_BASES = ((bool, bool), (int, int.__int__), (float, float.__float__), (str, str.__str__), (bytes, bytes),
          (bytearray, bytes), (complex, complex), (list, list.copy), (tuple, tuple), (dict, dict.copy),
          (frozenset, frozenset), (set, set))


def _exception_names(kind):
    """An exception class's name and its nearest builtin base's."""
    base = next(k for k in kind.__mro__ if k.__module__ == "builtins")
    return getattr(kind, "__qualname__", "Exception"), base.__name__


def _exception_reply(exc):
    kind = type(exc)
    name, base = _exception_names(kind)
    try:
        message = str(exc)
    except BaseException:  # noqa: BLE001 - its __str__ is the program's
        message = ""
    args = list(exc.args) if name == base else []  # the tests' side makes the builtin itself from them
    return ["raise", name, base, message, args if _crosses(args, _stand_in) else [message]]


def _load(code, module_name, names):
    path = _os.path.abspath("solution.py")
    module = _types.ModuleType(module_name)
    module.__file__, module.__builtins__ = path, __builtins__
    _sys.modules["solution"] = module
    if module_name == "__main__":
        _sys.modules["__main__"] = module
    _linecache.cache[path] = (len(code), None, code.splitlines(True), path)
    _objects[0] = module
    exec(compile(code, path, "exec", dont_inherit=True), module.__dict__)
    space = module.__dict__
    return {name: space[name] for name in names if name in space}


def _call(target, args, kwargs):
    result = target(*args, **kwargs)
    # The tests see what the call did to their lists, dicts and sets (in-place functions).
    changed = [[i, a] for i, a in enumerate(args) if type(a) in (list, dict, set)]
    return [result, changed]


def _raises(op, *operands):
    """A refused operation (`operator.<op>`, or hash, round, int, float, complex) run on the
    program's objects only for the exception it may raise: its value never crosses."""
    run = {"hash": hash, "round": round, "int": int, "float": float, "complex": complex}.get(op)
    (run or getattr(_operator, op if op not in ("and", "or") else op + "_"))(*operands)


_OPS = {
    "raises": _raises,
    "load": _load,
    "call": _call,
    "getattr": getattr,
    "setattr": setattr,
    "delattr": delattr,
    "getitem": lambda obj, key: obj[key],
    "setitem": lambda obj, key, value: obj.__setitem__(key, value),
    "delitem": lambda obj, key: obj.__delitem__(key),
    "contains": lambda obj, item: item in obj,
    "len": len,
    "iter": iter,
    "next": next,
    "eq": lambda a, b: a == b,
    "repr": repr,
    "str": str,
    "isinstance": isinstance,
    "issubclass": issubclass,
    "clone": lambda obj: _pickle.loads(_pickle.dumps(obj)),
}


def _answer_request(request):
    """[number, op, time limit, *arguments] -> [number, "ok", value] or an exception's reply."""
    number, op, limit, args = request[0], request[1], request[2], request[3:]
    try:
        _signal.setitimer(_signal.ITIMER_REAL, limit)
        _busy[0] = True
        try:
            value = _OPS[op](*args)
        finally:
            _busy[0] = False
            _signal.setitimer(_signal.ITIMER_REAL, 0)
        return [number, "ok", value]
    except _Timeout:
        return [number, "timeout"]
    except SystemExit as exc:
        return [number, "exit", repr(exc.code)[:100]]
    except BaseException as exc:  # noqa: BLE001 - the program's exception crosses by name
        return [number, *_exception_reply(exc)]


def _serve_requests(fd):
    _sys.set_int_max_str_digits(0)
    _signal.signal(_signal.SIGALRM, _on_alarm_while_busy)
    channel = Channel(_socket.socket(fileno=fd))
    while True:
        try:
            text = channel.receive()
        except EOFError:
            return
        channel.send(_reply_to(text))


def _reply_to(text):
    try:
        request = decode(text, lambda number, name, truthy: _objects[number])
    except BaseException as exc:  # noqa: BLE001
        return encode([-1, *_exception_reply(exc)])
    reply = _answer_request(request)
    try:
        return encode(reply, _stand_in)
    except BaseException as exc:  # noqa: BLE001 - a value too deep or too odd to cross
        return encode(_not_crossing(reply[0], exc))


def _warm_up():
    """Answer a load request and calls, as the tests send them first, then drop all it made;
    whether they were answered. Where the definitions run once (the seed), every program's process is
    forked from: the code that answers then runs warm in each, where warming it (Python rewrites a
    function's bytecode as it warms up) would copy pages of the seed's memory. No time limit (0):
    no SIGALRM where no handler waits for it. Never raises: it only saves time."""
    kept = {name: _sys.modules.get(name) for name in ("__main__", "solution")}
    lines = dict(_linecache.cache)
    program = "def f(x, *more):\n    if x is None:\n        raise ValueError(x)\n    return [x, {'k': (x, 0.5)}, *more]\n"
    calls = [[[1, -2], "a"], [2.5, True, b"b"], [{"s": [None]}], [None]]
    try:
        loaded = decode(_reply_to(encode([1, "load", 0, program, "__main__", ["f"]])), lambda number, *_: number)
        f = Ref(loaded[2]["f"], "", False)  # as the tests' side sends its handle
        answers = [decode(_reply_to(encode([n + 2, "call", 0, f, args, {}])), lambda *_: None)
                   for n, args in enumerate(calls)]
        return [a[1] for a in answers] == ["ok", "ok", "ok", "raise"]
    except BaseException:  # noqa: BLE001
        return False
    finally:
        if 0 in _objects:
            _objects[0].__dict__.clear()  # its function and globals would be a cycle, left to the collector
        _objects.clear()
        _numbers.clear()
        for name, module in kept.items():
            if module is None:
                _sys.modules.pop(name, None)
            else:
                _sys.modules[name] = module
        _linecache.cache.clear()
        _linecache.cache.update(lines)


def _crosses(reply, handle_of):
    try:
        encode(reply, handle_of)
        return True
    except BaseException:  # noqa: BLE001
        return False


def _not_crossing(number, exc):
    return [number, "raise", "NotPlainData", "TypeError", "the value cannot cross: %s" % exc, []]


_warm_up()  # last: it runs what is defined above
