"""The assertion-test harness as it runs INSIDE the sandbox (never imported by the project).

`code_harness.harness_program` ships this file's code (as bytecode for the local sandbox) with
the candidate program, the reference's setup and the compiled tests; `_main(data)` runs it.

Two threads. The main thread never runs the program: it holds the per-run tag and the output
fd, and writes every verdict. A second thread T runs the program (as a real module), the setup
and the tests; its bottom frame is the tests function itself, so no frame of T leads back to
the main thread. When a test ends, T's `_Case.__exit__` wakes the main thread and waits; the
main thread reads the verdict from T's stack, and only if that stack is exactly
`_Case.__exit__` called by the tests function (checked by code-object identity): a program
that signals, calls `__exit__` itself or prints lines gets no verdict it did not earn.
An audit hook (which nothing can remove) keeps frames, gc, tracing, ctypes, /proc and new
audit hooks out of the program's reach; see docs/sandbox.md for what it allows and why.
"""

import _thread
import builtins as _bi
import json as _json
import os as _os
import sys as _sys
import time as _time
import traceback as _tb
import types as _types

_getframe, _current_frames, _get_ident = _sys._getframe, _sys._current_frames, _thread.get_ident
_type, _id, _str, _len, _repr, _issubclass = type, id, str, len, repr, issubclass
_BaseException, _AssertionError, _MemoryError, _SystemExit = BaseException, AssertionError, MemoryError, SystemExit
_FunctionType, _ModuleType = _types.FunctionType, _types.ModuleType
_tp_flags = type.__dict__["__flags__"].__get__
_tp_mro = type.__dict__["__mro__"].__get__
_tp_dict = type.__dict__["__dict__"].__get__
_tp_name = type.__dict__["__name__"].__get__
_exc_args = BaseException.__dict__["args"].__get__
_HEAPTYPE = 1 << 9
_PLAIN = frozenset((int, float, complex, str, bytes, bool, type(None), range, type(...)))
_CONTAINERS = frozenset((list, tuple, set, frozenset, dict))
# Dunders through which a value decides comparisons and truth: a program-made class that
# defines one of them (and is not library code) is "untrusted" against builtin values.
_DECIDING = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__", "__len__",
             "__contains__")

_STDLIB = _os.path.dirname(_os.__file__) + "/"
_LIBS = (_STDLIB, *(p.rstrip("/") + "/" for p in _sys.path if p.endswith(("site-packages", "dist-packages"))),
         "<frozen ")
# Library files allowed to take frames for their own work (module names, logging's caller,
# tracebacks, doctest, asyncio); each event lists its own.
_FRAME_OK = {
    "sys._getframe": ("collections/", "typing.py", "enum.py", "logging/", "warnings.py", "doctest.py", "unittest/",
                      "_pytest/", "dataclasses.py"),
    "tb_frame": ("traceback.py", "doctest.py", "unittest/", "_pytest/", "asyncio/", "contextlib.py", "logging/"),
    "gi_frame": ("asyncio/", "types.py", "contextlib.py", "inspect.py"),
    "cr_frame": ("asyncio/", "types.py", "inspect.py"),
    "ag_frame": ("asyncio/", "types.py", "inspect.py"),
    "sys.settrace": ("doctest.py",), "sys.setprofile": (),
}
_WATCH = {"sys._getframe": "frame", "object.__getattr__": "attr", "sys._current_frames": "deny",
          "gc.get_objects": "deny", "gc.get_referrers": "deny", "gc.get_referents": "deny",
          "sys.settrace": "frame", "sys.setprofile": "frame", "sys.addaudithook": "deny", "open": "open",
          "compile": "compile", "code.__new__": "compile", "import": "import"}
_busy = set()  # threads inside the hook (the hook's own introspection raises events too)
_trusted_code = set()  # ids of the harness's code objects
_trusted_funcs = set()
_state = {}


class _Timeout(BaseException):
    pass


def _audit(event, args):
    kind = _WATCH.get(event)
    if kind is None:
        if event[:7] != "ctypes.":
            return
        kind = "deny"
    tid = _get_ident()
    if tid in _busy:
        return
    _busy.add(tid)
    try:
        why = _judge(kind, event, args)
    finally:
        _busy.discard(tid)
    if why:
        raise RuntimeError("the test harness does not let the program use " + why)


def _judge(kind, event, args):
    caller = _getframe(2)  # 0: _judge, 1: _audit, 2: the frame that raised the event
    if kind == "attr":
        name = args[1]
        if name in ("__code__", "gi_code", "cr_code", "ag_code", "f_code"):
            return name if _id(args[0]) in _trusted_funcs and not _harness_below(caller) else ""
        if name not in ("tb_frame", "gi_frame", "cr_frame", "ag_frame"):
            return ""
        event, kind = name, "frame"
    if kind == "open":
        path = args[0]
        if _type(path) is int:
            return ""
        path = _os.path.realpath(_os.fsdecode(path))
        return "" if not path.startswith("/proc/") or _harness_below(caller) else "open(%r)" % path
    if kind == "compile":
        name = args[1] if _type(args[1]) is _str else ""
        if not name.startswith(_LIBS) or _file(caller).startswith(_LIBS):
            return ""  # library code making its own code objects (importlib, asyncio, dataclasses)
        return "" if _harness_below(caller) else "%s with a library file name" % event
    if kind == "import":
        return "ctypes" if args[0] in ("ctypes", "_ctypes") and not _harness_below(caller) else ""
    if kind == "frame" and _file(caller).startswith(_frame_ok(event)):
        # A traceback's or a generator's frame goes on only to library code: the frame asking
        # must itself be called from the library (print_exc, asyncio), never straight from the
        # program (iterating traceback.walk_tb, Task.get_stack).
        below = caller.f_back
        if event == "sys._getframe" or (below is not None and _file(below).startswith(_LIBS)):
            return ""
    return "" if _harness_below(caller) else event


def _frame_ok(event, cache={}):  # noqa: B006 - a per-process cache
    prefixes = cache.get(event)
    if prefixes is None:
        prefixes = cache[event] = tuple(base + rel for base in _LIBS[:-1] for rel in _FRAME_OK.get(event, ()))
    return prefixes


def _file(frame):
    return frame.f_code.co_filename


def _harness_below(frame):
    """Whether the first non-library frame from `frame` down the stack is the harness's."""
    while frame is not None:
        code = frame.f_code
        if _id(code) in _trusted_code:
            return True
        if not code.co_filename.startswith(_LIBS):
            return False
        frame = frame.f_back
    return False


def _collect_trusted(objects):
    todo = []
    for obj in objects:
        if _type(obj) is _FunctionType:
            _trusted_funcs.add(_id(obj))
            todo.append(obj.__code__)
        elif _type(obj) is type:
            todo.extend(_collect_from_class(obj))
    while todo:
        code = todo.pop()
        _trusted_code.add(_id(code))
        todo.extend(c for c in code.co_consts if _type(c) is _type(code))


def _collect_from_class(cls):
    for value in _tp_dict(cls).values():
        if _type(value) is _FunctionType:
            _trusted_funcs.add(_id(value))
            yield value.__code__


# ---- comparisons in tests: a builtin value is never compared with a program-made impostor ----


def _class_ok(cls, cache):
    ok = cache.get(cls)
    if ok is None:
        ok = True
        for klass in _tp_mro(cls):
            if not _tp_flags(klass) & _HEAPTYPE:
                continue
            attrs = _tp_dict(klass)
            for name in _DECIDING:
                value = attrs.get(name, attrs)
                if value is attrs or value is None:
                    continue
                if not (_type(value) is _FunctionType and value.__code__.co_filename.startswith(_LIBS)):
                    ok = False
                    break
            if not ok:
                break
        cache[cls] = ok
    return ok


def _trusted(value, cache):
    """No object in `value` (followed through builtin containers, each once) is of a class that
    decides comparisons or truth with its own (program-made) code."""
    todo, seen = [value], set()
    while todo:
        item = todo.pop()
        cls = _type(item)
        if cls in _PLAIN:
            continue
        if cls not in _CONTAINERS:
            if not _class_ok(cls, cache):
                return False
            base = next((b for b in (list, tuple, dict, set, frozenset) if _issubclass(cls, b)), None)
            if base is None:
                continue
            item, cls = base(item), base  # a builtin subclass that decides nothing itself: its contents
        if _id(item) in seen:
            continue
        seen.add(_id(item))
        if cls is dict:
            todo.extend(item.keys())
            todo.extend(item.values())
        elif not set(map(_type, item)) <= _PLAIN:
            todo.extend(item)
    return True


def _cmp(op, left, right):
    cache = {}
    if _trusted(left, cache) != _trusted(right, cache):
        # One side is a program-made value that decides comparisons itself: unequal to any
        # builtin value, whatever its methods say; unordered.
        if op in ("==", "in"):
            return False
        if op in ("!=", "not in"):
            return True
        raise TypeError("%s between a builtin value and a %s, whose class decides comparisons itself"
                        % (op, _tp_name(_type(left if not _trusted(left, cache) else right))))
    if op == "==":
        return left == right
    if op == "!=":
        return left != right
    if op == "<":
        return left < right
    if op == "<=":
        return left <= right
    if op == ">":
        return left > right
    if op == ">=":
        return left >= right
    if op == "in":
        return left in right
    return left not in right


def _truth(value):
    if not _trusted(value, {}):
        raise TypeError("the truth of a %s, whose class decides truth itself, is not accepted as a test result"
                        % _tp_name(_type(value)))
    return bool(value)


def _cut(text, n=200):
    return text if _len(text) <= n else text[: n - 3] + "..."


def _safe_repr(value):
    try:
        text = _repr(value)
        return _cut(text) if _type(text) is _str else "?"
    except _BaseException:
        return "<%s>" % _tp_name(_type(value))


def _call(fn_name, args, expected, label):
    """One call-based test: `fn_name(*args)` (or `Solution().fn_name(*args)`) equals `expected`;
    a one-element list as expected also accepts its element (APPS)."""
    ns = _state["ns"]
    fn = ns.get(fn_name)
    if not callable(fn):
        cls = ns.get("Solution")
        if cls is None:
            raise NameError("%r is not defined (nor a class Solution with that method)" % fn_name)
        fn = getattr(cls(), fn_name)
    actual = fn(*args)
    if _type(actual) is tuple:
        actual = list(actual)
    if _cmp("==", actual, expected):
        return
    if _type(expected) is list and _len(expected) == 1 and _cmp("==", actual, expected[0]):
        return
    raise _AssertionError("%s returned %s, expected %s" % (_cut(label, 120), _safe_repr(actual), _safe_repr(expected)))


def _run_pytest_item(name):
    """A pytest-style test: `test_x` or `TestClass.test_x`; parametrize marks expand into calls."""
    tns = _state["tns"]
    owner, _, attr = name.rpartition(".")
    if owner:
        instance = tns[owner]()
        if hasattr(instance, "setup_method"):
            instance.setup_method(getattr(instance, attr))
        fn = getattr(instance, attr)
    else:
        fn = tns[name]
    calls = [{}]
    for mark in reversed(getattr(fn, "pytestmark", [])):
        if getattr(mark, "name", "") != "parametrize":
            continue
        names, values = mark.args[0], mark.args[1]
        names = [n.strip() for n in names.split(",")] if _type(names) is _str else list(names)
        rows = [getattr(v, "values", v) for v in values]
        rows = [(r,) if _len(names) == 1 else tuple(r) for r in rows]
        calls = [{**c, **dict(zip(names, r))} for c in calls for r in rows]
    code = getattr(fn, "__code__", None)
    wanted = code.co_varnames[: code.co_argcount] if code is not None else ()
    missing = [a for a in wanted if a != "self" and a not in calls[0]]
    if missing:
        raise TypeError("test %s takes fixtures (%s), which are not supported" % (name, ", ".join(missing)))
    for kwargs in calls:
        fn(**kwargs)


def _restore():
    """Put back what the program may have patched: the modules the tests import, the names the setup bound."""
    ns = _state["ns"]
    for key, value in _state["names"].items():
        if ns.get(key, ns) is not value:
            ns[key] = value
    for name, (module, saved) in _state["modules"].items():
        _sys.modules[name] = module
        current = module.__dict__
        for key, value in saved.items():
            if current.get(key, saved) is not value:
                current[key] = value


class _Case:
    failed = False

    def __init__(self, i):
        self.i = i

    def __enter__(self):
        if self.i >= 0:
            _restore()

    def __exit__(self, kind, e, tb):
        detail = _describe(e)
        _state["signal"].release()
        _state["ack"].acquire()
        return True


def _describe(e):
    """What the verdict line says about exception `e` (computed in T: it may run program code)."""
    if e is None:
        return ""
    try:
        if isinstance(e, _AssertionError):
            return _cut(_str(e), 300)
        return _cut(_tb.format_exception_only(_type(e), e)[-1].strip(), 300)
    except _BaseException:
        return _tp_name(_type(e))


def _load_program():
    """Phase -1 (in T): the program as a real module, then the reference's setup; returns the entry point.

    The setup runs in its own namespace (a copy of the program's, plus the comparison guards),
    so the functions it defines (`check`, helpers) keep globals the program cannot rebind; the
    names it binds are copied into the program's namespace for the tests, and put back before
    each test."""
    data, ns = _state["data"], _state["ns"]
    exec(compile(data["code"], _state["path"], "exec"), ns)
    for name, (module, _) in _state["modules"].items():
        _sys.modules[name] = module  # the setup imports what was there before the program ran
    if _state["setup"] is not None:
        setup_ns = dict(ns)
        before = {k: _id(v) for k, v in setup_ns.items()}
        setup_ns.update(_state["guards"])
        exec(_state["setup"], setup_ns)
        bound = {k: v for k, v in setup_ns.items() if before.get(k) != _id(v) and k not in _state["guards"]}
        ns.update(bound)
        _state["names"] = bound
    if _state["tests_module"] is not None:
        exec(_state["tests_module"], _state["tns"])
    entry = data["entry_point"]
    if entry:
        if not callable(ns.get(entry)):
            raise NameError("entry point %r is not defined" % entry)
        return ns[entry]
    return None


def _classify(e, detail):
    if e is None:
        return "passed", ""
    kind = _type(e)
    if _issubclass(kind, _Timeout):
        return "timeout", "over %g s" % _state["limit"]
    if _issubclass(kind, _MemoryError):
        return "memory", "MemoryError"
    if _issubclass(kind, _AssertionError):
        return "failed", detail if _type(detail) is _str else ""
    if _issubclass(kind, _SystemExit):
        code = _exc_args(e)
        code = code[0] if _len(code) == 1 and _type(code[0]) in (int, _str) else None
        return "error", "the program called exit(%r)" % (code,)
    return "error", detail if _type(detail) is _str else _tp_name(kind)


def _verified(tid):
    """(test index, exception, detail) when thread `tid` waits in `_Case.__exit__` called by the
    tests function at the bottom of its stack; otherwise None."""
    top = _current_frames().get(tid)
    if top is None or _id(top.f_code) != _state["exit_code"]:
        return None
    caller = top.f_back
    if caller is None or caller.f_code is not _state["tests_code"] or caller.f_back is not None:
        return None
    local = top.f_locals
    case = local.get("self")
    if _type(case) is not _Case or _type(case.i) is not int:
        return None
    return case.i, local.get("e"), local.get("detail")


def _interrupt(tid):
    import ctypes  # only when a test overruns: importing it costs milliseconds per run

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(_Timeout))


def _main(data, load):
    tag, out = data.pop("tag"), _os.dup(1)

    def report(**record):
        _os.write(out, (tag + _json.dumps(record) + "\n").encode())

    try:
        _os.unlink(_sys.argv[0])  # the harness file holds the tag
    except OSError:
        pass
    path = _os.path.join(_os.getcwd(), "solution.py")
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write(data["code"])  # for inspect.getsource, linecache and tracebacks, as with `python solution.py`
    module = _ModuleType(data["module"])
    module.__file__, module.__builtins__ = path, _bi
    _sys.modules["solution"] = module
    if data["module"] == "__main__":
        _sys.modules["__main__"] = module
    _sys.argv[:] = [path]
    modules = {}
    for name in data["modules"]:
        try:
            mod = __import__(name)
        except _BaseException:
            continue
        modules[name] = (mod, dict(mod.__dict__))
    scratch = {"__builtins__": _bi}
    exec(load("tests.py"), scratch)
    tests_code = scratch["_grpo_tests"].__code__
    tests = _FunctionType(tests_code, module.__dict__, "_grpo_tests")
    pristine = dict(_bi.__dict__)
    guards = {"_grpo_cmp": _cmp, "_grpo_truth": _truth, "_grpo_b": pristine}
    tns = {"__name__": "test_solution", "__builtins__": _bi, **guards}
    _state.update(data=data, ns=module.__dict__, guards=guards, names={}, tns=tns, path=path, modules=modules, limit=data["limit"],
                  setup=load("setup.py") if data["has_setup"] else None,
                  tests_module=load("test_solution.py") if data["pytest"] else None,
                  signal=_thread.allocate_lock(), ack=_thread.allocate_lock(),
                  exit_code=_id(_Case.__exit__.__code__), tests_code=tests_code)
    _state["signal"].acquire()
    _state["ack"].acquire()
    _collect_trusted([f for f in globals().values() if _type(f) in (_FunctionType, type)] + [report])
    _sys.addaudithook(_audit)
    tid = _thread.start_new_thread(tests, (_Case, _load_program, _cmp, _truth, _call, pristine, _run_pytest_item))
    _wait(tid, data["ntests"], report)
    report(done=True)


def _wait(tid, ntests, report):
    limit, signal, ack = _state["limit"], _state["signal"], _state["ack"]
    reported, interrupted = set(), False
    deadline = _time.monotonic() + limit
    while True:
        if not signal.acquire(timeout=max(0.0, deadline - _time.monotonic())):
            if interrupted:  # it did not stop: no later test can run
                index = next((i for i in range(ntests) if i not in reported), None)
                if "loaded" not in _state:
                    report(phase="solution.py", status="timeout", detail="over %g s" % limit)
                elif index is not None:
                    report(test=index, status="timeout", detail="over %g s; later tests did not run" % limit)
                report(done=True)
                _os._exit(0)
            _interrupt(tid)
            interrupted, deadline = True, _time.monotonic() + min(1.0, limit)
            continue
        seen = _verified(tid)
        if seen is None:
            continue  # not a test's end (the program woke us): ignored
        index, e, detail = seen
        status, detail = _classify(e, detail)
        if index == -1:
            _state["loaded"] = True
            if status != "passed":
                _Case.failed = True
                report(phase="solution.py", status=status, detail=detail)
                ack.release()
                return
        elif index == -2:
            if status != "passed":
                report(phase="setup", status=status, detail=detail)
            ack.release()
            return
        elif 0 <= index < ntests and index not in reported:
            reported.add(index)
            report(test=index, status=status, detail=detail)
        interrupted = False
        ack.release()
        deadline = _time.monotonic() + limit
