"""The tests' process of `code_tests`: runs the reference's setup and tests and writes the
verdicts; the program runs in another process (code_program_side.py), reached over the channel
on fd 3. Runs as source after code_wire.py in the sandbox; never imported by the project.

Everything here is the reference's or ours. From the program's process come only plain data and
handles (`ProgramHandle`): a handle forwards calls, attribute reads, item access, iteration and `len` to
the program's process, and refuses to be compared with test values, hashed, used in arithmetic
or (when its class decides truth itself) tested for truth: `NotPlainData`, which fails the test
with the type named. The per-run data (program text, tests, limits) comes on stdin.
"""

import builtins as _builtins
import json as _jsonlib
import os as _os
# The C modules, not signal's and socket's wrappers: a fresh process's first use of their enum
# conversions copies (copy-on-write) pages of its parent's.
import _signal
import _socket
import sys as _sys
import time as _time
import traceback as _traceback

_NOTHING = object()
try:
    import ctypes as _ctypes  # optional: without it the tests' process stays dumpable

    _prctl = _ctypes.CDLL(None).prctl  # once where the definitions run once: each CDLL makes a class
except (ImportError, OSError):
    _prctl = None


class ProgramExit(Exception):
    """The program called exit() during a call."""


class ProgramError(Exception):
    """The program's process raised something that is no Exception, or answered nonsense."""


def _on_test_timeout(signum, frame):
    raise _Timeout()


class _Program:
    """The channel to the program's process, one request at a time."""

    def __init__(self, channel):
        # Request 1, the program's text, was sent before this process started.
        self.channel, self.number, self.deadline, self.last = channel, 1, _time.monotonic() + _Case.limit, _NOTHING
        self.classes = {}  # (name, builtin base) -> the class standing in for a program exception class
        self.load_reply = None  # the load's reply, when it came while the reference's setup asked first

    def send(self, op, *args):
        """Send a request with what is left of the time limit; returns its number."""
        self.number += 1
        limit = max(0.001, self.deadline - _time.monotonic())
        try:
            self.channel.send(encode([self.number, op, limit, *args], _ref_of))
        except OSError:
            raise ProgramExit("the program's process ended (it exited or was killed)") from None
        return self.number

    def receive(self, number):
        if number == 1 and self.load_reply is not None:
            return self.load_reply
        try:
            while True:  # a reply to a request the time limit gave up on comes first: skipped
                reply = decode(self.channel.receive(), _made)
                if type(reply) is list and len(reply) >= 2 and type(reply[1]) is str:
                    if reply[0] == number:
                        return reply
                    if reply[0] == 1 and self.load_reply is None:  # kept: the load is read after the setup
                        self.load_reply = reply
        except ValueError as exc:
            raise ProgramError("the program's process sent what is not plain data: %s" % exc) from None
        except (EOFError, OSError):
            raise ProgramExit("the program's process ended (it exited or was killed)") from None

    def ask(self, op, *args):
        return self.result(self.receive(self.send(op, *args)))

    def result(self, reply):
        if type(reply) is not list or len(reply) < 2:
            raise ProgramError("the program's process answered %s" % _cut(repr(reply), 120))
        kind = reply[1]
        if kind == "ok" and len(reply) == 3:
            return reply[2]
        if kind == "timeout":
            raise _Timeout()
        if kind == "exit":
            raise ProgramExit("the program called exit(%s)" % _cut(str(reply[2:3] and reply[2]), 80))
        if kind == "raise" and len(reply) == 6:
            raise self._rebuilt(*reply[2:])
        raise ProgramError("the program's process answered %s" % _cut(repr(reply), 120))

    def exception_class(self, name, base_name):
        """A program's exception class as one of ours: its builtin base (ZeroDivisionError), or a
        class of its name made here on that base, the same one for every use of the name (so
        `pytest.raises(solution.OwnError)` catches what the program raises); never the program's."""
        base = getattr(_builtins, base_name, None) if type(base_name) is str else None
        if not (type(base) is type and issubclass(base, BaseException)):
            base = Exception
        name = _cut(str(name), 100)
        if name == base.__name__:
            return base
        cls = self.classes.get((name, base))
        if cls is None:
            cls = self.classes[(name, base)] = type(name, (base,), {"__module__": "solution"})
        return cls

    def _rebuilt(self, name, base_name, message, args):
        """The program's exception as one of ours, an instance of `exception_class`."""
        cls, message = self.exception_class(name, base_name), _cut(str(message), 2000)
        if cls.__name__ == "NotPlainData":  # the program's side could not send its value
            return NotPlainData(message)
        if issubclass(cls, SystemExit):
            return ProgramExit("the program raised %s" % cls.__name__)
        if not issubclass(cls, Exception) or issubclass(cls, _Timeout):
            return ProgramError("%s: %s" % (cls.__name__, message))
        if cls.__module__ == "builtins":
            try:
                return cls(*args) if type(args) is list else cls(message)
            except BaseException:  # noqa: BLE001 - e.g. an OSError with odd arguments
                return cls(message)
        return cls(message)


_program = None


def _ref_of(value):
    if type(value) is ProgramHandle:
        return Ref(object.__getattribute__(value, "_n"), "", False)
    if isinstance(value, _Attributes):  # the plain copy of a program object (a namedtuple): the object itself
        return Ref(value.__dict__["_grpo_n"], "", False)
    return None  # NotPlainData: the tests pass something that is not plain data to the program


def _not_plain(handle, doing):
    return NotPlainData("the program's %s is not plain data: it cannot be %s on the tests' side"
                        % (object.__getattribute__(handle, "_type"), doing))


def _write_back(args, changed):
    """What a call did to the tests' own lists, dicts and sets, copied back into them."""
    if type(changed) is not list:
        return
    for item in changed:
        if type(item) is not list or len(item) != 2 or type(item[0]) is not int or not 0 <= item[0] < len(args):
            continue
        mine, theirs = args[item[0]], item[1]
        if type(mine) is not type(theirs):
            continue
        if type(mine) is list:
            mine[:] = theirs
        elif type(mine) in (dict, set):
            mine.clear()
            mine.update(theirs)


def _compared(self, other):
    """`self == other`. Two of the program's objects: its own equality decides, as in Python. With
    a test value, only "unequal" is taken from the program (any program can be unequal to a
    value honestly); an object that claims to equal a test value fails the test."""
    result = _program.ask("eq", self, other)
    if result is False or (result is True and type(other) is ProgramHandle):
        return result
    raise _not_plain(self, "compared with a %s" % type(other).__name__)


def _refuse(doing, op, reflected=False):
    """An operation a handle never answers with a value here. The program's object runs it (`op`,
    over there): an exception it raises is the program's answer (an honest `Vector + 5` raising
    TypeError), a value never crosses and the test fails."""

    def refuse(self, *args):
        _program.ask("raises", op, *((*args, self) if reflected else (self, *args)))
        raise _not_plain(self, doing)

    return refuse


def _arithmetic(*names):
    """`__add__`, `__radd__`, ...: each refused, run by the program only to see whether it raises."""
    out = {}
    for name in names:
        out["__%s__" % name] = _refuse("used in arithmetic", name)
        out["__r%s__" % name] = _refuse("used in arithmetic", name, reflected=True)
    return out


class ProgramHandle:
    """A handle to an object of the program's process."""

    __slots__ = ("_n", "_type", "_truthy")

    def __init__(self, number, type_name, truthy):
        object.__setattr__(self, "_n", number)
        object.__setattr__(self, "_type", type_name)
        object.__setattr__(self, "_truthy", truthy)

    def __getattr__(self, name):
        return _program.ask("getattr", self, name)

    def __setattr__(self, name, value):
        _program.ask("setattr", self, name, value)

    def __delattr__(self, name):
        _program.ask("delattr", self, name)

    def __call__(self, *args, **kwargs):
        result, changed = _program.ask("call", self, list(args), kwargs)
        _write_back(args, changed)
        _program.last = result
        return result

    def __getitem__(self, key):
        return _program.ask("getitem", self, key)

    def __setitem__(self, key, value):
        _program.ask("setitem", self, key, value)

    def __delitem__(self, key):
        _program.ask("delitem", self, key)

    def __contains__(self, item):
        return _plain_bool(_program.ask("contains", self, item), self)

    def __len__(self):
        n = _program.ask("len", self)
        if type(n) is not int:
            raise _not_plain(self, "measured (its len gave a non-int)")
        return n

    def __iter__(self):
        return _program.ask("iter", self)

    def __next__(self):
        return _program.ask("next", self)

    def __bool__(self):
        if object.__getattribute__(self, "_truthy"):
            return True
        raise _not_plain(self, "tested for truth (its class decides truth itself)")

    def __eq__(self, other):
        return _compared(self, other)

    def __ne__(self, other):
        return not _compared(self, other)

    def __repr__(self):
        text = _program.ask("repr", self)
        return text if type(text) is str else "<%s>" % object.__getattribute__(self, "_type")

    def __str__(self):
        text = _program.ask("str", self)
        return text if type(text) is str else repr(self)

    def __instancecheck__(self, value):
        return _plain_bool(_program.ask("isinstance", value, self), self)

    def __subclasscheck__(self, value):
        return _plain_bool(_program.ask("issubclass", value, self), self)

    def __reduce__(self):  # pickle and copy: the copy is made in the program's process
        return _clone, (object.__getattribute__(self, "_n"),)

    def __enter__(self):
        return self.__getattr__("__enter__")()

    def __exit__(self, kind, exc, tb):
        return self.__getattr__("__exit__")(None, None, None) if kind is None else None

    __hash__ = _refuse("hashed", "hash")
    __lt__, __le__, __gt__, __ge__ = (_refuse("ordered", op) for op in ("lt", "le", "gt", "ge"))
    __neg__, __pos__, __abs__, __invert__, __index__, __round__, __int__, __float__, __complex__ = (
        _refuse("used in arithmetic", op) for op in ("neg", "pos", "abs", "invert", "index", "round", "int", "float",
                                                      "complex"))


for _name, _op in _arithmetic("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift",
                              "rshift", "matmul").items():
    setattr(ProgramHandle, _name, _op)


class _Attributes:
    """A plain value from the program that still answers attribute reads from its object there
    (a namedtuple's `.x`): comparisons and arithmetic are the builtin's own, on the copy."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _program.ask("getattr", ProgramHandle(self.__dict__["_grpo_n"], "", True), name)


_WITH_ATTRIBUTES = {}
_HANDLES = {}  # handle number -> its ProgramHandle, for the job running (emptied by each job's _main)


def _made(number, type_name, truthy, value=None):
    """What a handle on the wire becomes here: a ProgramHandle, its plain value with attributes,
    or (number None) the class standing in for an exception class of the program's."""
    if number is None:
        return _program.exception_class(type_name, value)
    if value is None:  # one handle per object: `is` holds between two answers that are the same object
        handle = _HANDLES.get(number)
        if handle is None:
            handle = _HANDLES[number] = ProgramHandle(number, type_name, truthy)
        return handle
    base = type(value)
    if base is bool:
        return value
    cls = _WITH_ATTRIBUTES.get(base)
    if cls is None:
        cls = _WITH_ATTRIBUTES[base] = type(base.__name__, (_Attributes, base), {})
    made = cls(value)
    made._grpo_n = number
    return made


def _plain_bool(value, handle):
    if type(value) is bool:
        return value
    raise _not_plain(handle, "tested for truth")


def _clone(number):
    return _program.ask("clone", ProgramHandle(number, "", False))


# ---- verdicts -------------------------------------------------------------------------------


def _cut(text, n=200):
    return text if len(text) <= n else text[: n - 3] + "..."


def _shown(value):
    try:
        return _cut(repr(value))
    except BaseException:  # noqa: BLE001 - a handle whose process stopped answering
        return "<%s>" % type(value).__name__


class _Case:
    """`with _grpo_case(i):` around test i (-2: the tests' own setup): its time limit, its
    verdict; an exception ends the test, not the tests."""

    out, limit = 1, 3.0

    def __init__(self, index):
        self.index = index

    def __enter__(self):
        _program.last = _NOTHING
        _program.deadline = _time.monotonic() + _Case.limit
        del NotPlainData.made[:]
        if self.index >= 0:
            _signal.setitimer(_signal.ITIMER_REAL, _Case.limit + 0.05)

    def __exit__(self, kind, exc, tb):
        if self.index >= 0:
            _signal.setitimer(_signal.ITIMER_REAL, 0)
            _program.deadline = _time.monotonic() + _Case.limit  # the setup statements before the next test
        status, detail = _classify(exc)
        refused = NotPlainData.made[:1]
        del NotPlainData.made[:]
        if refused and status in ("passed", "failed", "error"):  # a refusal the test caught fails it
            status, detail = _classify(refused[0])
        if self.index >= 0:
            _report(test=self.index, status=status, detail=detail)
        elif status != "passed":
            _report(phase="setup", status=status, detail=detail)
        return True


def _report(**record):
    _os.write(_Case.out, (REPORT_PREFIX + _jsonlib.dumps(record) + "\n").encode())


def _classify(e):
    if e is None:
        return "passed", ""
    if isinstance(e, _Skipped) or (type(e).__name__ in ("Skipped", "XFailed") and any(  # pytest.skip(), .xfail()
            k.__name__ == "OutcomeException" and k.__module__ == "_pytest.outcomes" for k in type(e).__mro__)):
        return "skipped", _cut(str(e), 300)
    try:
        if isinstance(e, _Timeout):
            return "timeout", "over %g s" % _Case.limit
        if isinstance(e, MemoryError):
            return "memory", "MemoryError"
        if isinstance(e, NotPlainData):
            return "failed", _cut(str(e), 300)
        if isinstance(e, AssertionError):
            detail = str(e)
            if not detail and _program.last is not _NOTHING:
                detail = "the program returned " + _shown(_program.last)
            return "failed", _cut(detail, 300)
        if isinstance(e, ProgramExit):
            return "error", _cut(str(e), 300)
        return "error", _cut(_traceback.format_exception_only(type(e), e)[-1].strip(), 300)
    except _Timeout:
        return "timeout", "over %g s" % _Case.limit


# ---- the tests -------------------------------------------------------------------------------


def _grpo_call(fn_name, args, expected, label):
    """One call-based test: `fn_name(*args)` (or `Solution().fn_name(*args)`) equals `expected`;
    a one-element list as expected also accepts its element (APPS)."""
    space = _state["space"]
    fn = space.get(fn_name)
    if fn is None:
        cls = space.get("Solution")
        if cls is None:
            raise NameError("%r is not defined (nor a class Solution with that method)" % fn_name)
        fn = getattr(cls(), fn_name)
    actual = fn(*args)
    if type(actual) is tuple:
        actual = list(actual)
    if actual == expected or (type(expected) is list and len(expected) == 1 and actual == expected[0]):
        return
    raise AssertionError("%s returned %s, expected %s" % (_cut(label, 120), _shown(actual), _shown(expected)))


def _grpo_pt(name):
    """A pytest-style test: `test_x` or `Class.test_x`, as pytest runs it: the module's and the
    class's setup once (`setup_module`, `setup_class`, unittest's `setUpClass`), then around
    each test `setup_function`/`setup_method` or unittest's `setUp`, and their teardowns; skip
    and xfail marks skip it (it is no test of the program); parametrize marks expand into calls."""
    space = _state["space"]
    owner, _, attr = name.rpartition(".")
    cls = space[owner] if owner else None
    _once(("module",), lambda: _optional_arg(space.get("setup_module") or space.get("setUpModule"), _ModuleView(space)))
    unit = cls is not None and any(k.__name__ == "TestCase" and k.__module__.startswith("unittest") for k in cls.__mro__)
    if cls is not None:
        _once(("class", owner), lambda: _optional_arg(getattr(cls, "setUpClass" if unit else "setup_class", None), cls))
    instance = None if cls is None else cls(attr) if unit else cls()
    fn = getattr(instance, attr) if owner else space[name]
    marks = [*getattr(fn, "pytestmark", []), *getattr(cls, "pytestmark", [])]
    _skip_if_marked(marks, fn, space)
    calls = [{}]
    for mark in reversed(marks):
        if getattr(mark, "name", "") != "parametrize":
            continue
        names, values = mark.args[0], mark.args[1]
        names = [n.strip() for n in names.split(",")] if type(names) is str else list(names)
        rows = [getattr(v, "values", v) for v in values]
        rows = [(r,) if len(names) == 1 else tuple(r) for r in rows]
        calls = [{**c, **dict(zip(names, r))} for c in calls for r in rows]
    code = getattr(fn, "__code__", None)
    flags = code.co_flags if code is not None else 0
    if flags & (0x80 | 0x200):  # CO_COROUTINE, CO_ASYNC_GENERATOR: calling it would run none of the body
        raise AssertionError("async def functions are not natively supported (pytest fails %s)" % name)
    if flags & 0x20:  # CO_GENERATOR
        raise TypeError("'yield' keyword is allowed in fixtures, but not in tests (%s)" % name)
    wanted = code.co_varnames[: code.co_argcount] if code is not None else ()
    missing = [a for a in wanted if a != "self" and a not in calls[0]]
    if missing:
        raise TypeError("test %s takes fixtures (%s), which are not supported" % (name, ", ".join(missing)))
    around = (getattr(instance, "setUp", None), getattr(instance, "tearDown", None), None) if unit else (
        (getattr(instance, "setup_method", None), getattr(instance, "teardown_method", None), fn) if owner else
        (space.get("setup_function"), space.get("teardown_function"), fn))
    _optional_arg(around[0], around[2])
    try:
        for kwargs in calls:
            fn(**kwargs)
    finally:
        _optional_arg(around[1], around[2])


def _grpo_star(space, names):
    """`from solution import *` in a pytest module: the program's values of `names` (read by the
    module, bound nowhere in it), each only where the module has not bound it yet."""
    for name in names:
        if name not in space:
            try:
                space[name] = getattr(_sys.modules["solution"], name)
            except AttributeError:
                pass


class _Skipped(Exception):
    """A test the reference skips (a skip, skipif or xfail mark): no test of the program."""


def _skip_if_marked(marks, fn, space):
    for mark in marks:
        kind, args = getattr(mark, "name", ""), getattr(mark, "args", ())
        condition = args[0] if kind == "skipif" and args else True
        if type(condition) is str:
            condition = eval(condition, space)  # noqa: S307 - the reference's own condition, as pytest evaluates it
        if kind in ("skip", "xfail") or (kind == "skipif" and condition):
            raise _Skipped("%s: %s" % (kind, getattr(mark, "kwargs", {}).get("reason", "")))
    if getattr(fn, "__unittest_skip__", False):
        raise _Skipped("unittest.skip: %s" % getattr(fn, "__unittest_skip_why__", ""))


def _once(key, run):
    """`run()` the first time `key` is met in this job; its exception again each later time, as
    pytest errors every test of a module or class whose setup failed."""
    done = _state.setdefault("once", {})
    if key not in done:
        try:
            run()
            done[key] = None
        except BaseException as exc:  # noqa: BLE001 - re-raised for each test it spoils
            done[key] = exc
    if done[key] is not None:
        raise done[key]


def _optional_arg(hook, arg):
    """Call a pytest setup or teardown hook with its argument when it takes one, as pytest does."""
    if hook is None:
        return
    code = getattr(getattr(hook, "__func__", hook), "__code__", None)
    bound = 1 if hasattr(hook, "__self__") else 0
    hook(arg) if code is not None and code.co_argcount - bound >= 1 else hook()


class _ModuleView:
    """The tests' module as `setup_module(module)` receives it: its globals as attributes."""

    def __init__(self, space):
        object.__setattr__(self, "_space", space)

    def __getattr__(self, name):
        try:
            return self._space[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        self._space[name] = value


_state = {}


def _loaded(data):
    """The program's names that the tests read (the answer to request 1); None when it did not
    load (reported as phase solution.py)."""
    _signal.setitimer(_signal.ITIMER_REAL, max(0.001, _program.deadline - _time.monotonic()) + 0.05)
    try:
        names = _program.result(_program.receive(1))
        if type(names) is not dict:
            raise ProgramError("the program's process answered the load with a %s" % type(names).__name__)
        if data["entry"] and data["entry"] not in names:
            raise NameError("entry point %r is not defined" % data["entry"])
    except BaseException as exc:  # noqa: BLE001 - reported as the program's failure to load
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        status, detail = _classify(exc)
        _report(phase="solution.py", status="error" if status in ("passed", "failed") else status, detail=detail)
        return None
    _signal.setitimer(_signal.ITIMER_REAL, 0)
    return names


def _main():
    _sys.set_int_max_str_digits(0)
    data = _jsonlib.loads(_sys.stdin.read())
    if _prctl is not None:
        _prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the program cannot open our /proc files
    global _program, _state
    _HANDLES.clear()  # numbers are the program's process's: a new job's name other objects
    _Case.out, _Case.limit = _os.dup(1), data["limit"]
    try:
        _program = _Program(Channel(_socket.socket(fileno=3)))
    except OSError:  # a backend that dropped the job's peer: not the program's fault
        return _report(infra="the sandbox backend ran the tests without the program's process (no fd 3)")
    _os.dup2(2, 1)  # the tests' own prints go to stderr: stdout holds only verdicts
    _sys.stdout = _sys.stderr
    _signal.signal(_signal.SIGALRM, _on_test_timeout)
    space = {"__name__": "test_solution", "__builtins__": _builtins, "_grpo_case": _Case, "_grpo_call": _grpo_call,
             "_grpo_pt": _grpo_pt, "_grpo_star": _grpo_star}
    _state = {"space": space}  # bound, not stored: the backend puts globals back after each job
    _sys.modules["solution"] = ProgramHandle(0, "module", True)
    # The reference's own definitions (the prompt's helpers, the setup) are ours; the program's
    # names fill in only what the reference does not define. A pytest module imports the
    # program: it runs once the program has loaded (its process loads it meanwhile).
    tests = compile(data["tests"], "tests.py", "exec", dont_inherit=True)
    for part in ("prompt", "setup", "pytest"):
        if part == "pytest":
            names = _loaded(data)
            if names is None:
                return _report(done=True)
        if data[part]:
            try:
                exec(compile(data[part], part + ".py", "exec", dont_inherit=True), space)
            except BaseException as exc:  # noqa: BLE001 - a reference that does not run fails every test
                if part != "prompt":
                    _report(phase="setup", status="error", detail=_classify(exc)[1])
                    return _report(done=True)
    for name, value in names.items():
        if type(name) is str and name not in space:
            space[name] = value
    exec(tests, space)
    with _Case(-2):
        space["_grpo_tests"](names.get(data["entry"]) if data["entry"] else None)
    _report(done=True)
