"""The part of the assertion-test harness that runs in the program's thread (see code_runtime.py).

Executed by the harness into a namespace of its own, before the program runs: nothing here
(functions, their globals, `_Case`) leads to the harness's main thread, its audit hook or the
per-run tag. The tag and the tests' code object exist here only as constants of the per-run
`_Case.__exit__`, whose code the audit hook keeps from the program.
"""

import _thread
import json as _json
import os as _os
import sys as _sys
import traceback as _tb
import types as _types

_type, _id, _str, _len, _repr, _issubclass = type, id, str, len, repr, issubclass
_set, _map, _next, _getattr, _callable, _list, _tuple, _dict, _zip = set, map, next, getattr, callable, list, tuple, dict, zip
_BaseException, _AssertionError, _MemoryError, _SystemExit = BaseException, AssertionError, MemoryError, SystemExit
_FunctionType = _types.FunctionType
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
_LIBS = (_os.path.dirname(_os.__file__) + "/",
         *(p.rstrip("/") + "/" for p in _sys.path if p.endswith(("site-packages", "dist-packages"))))
_state = {}
_progress = []  # indices whose verdict was written (read by the main thread for its deadlines)
_finished = _thread.allocate_lock()  # the main thread sleeps on it; the tests end the process themselves


class _Timeout(BaseException):
    pass


def _class_ok(cls, cache, _tp_mro=_tp_mro, _tp_flags=_tp_flags, _tp_dict=_tp_dict, _HEAPTYPE=_HEAPTYPE,
              _DECIDING=_DECIDING, _type=_type, _FunctionType=_FunctionType, _LIBS=_LIBS):
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


def _trusted(value, cache, _class_ok=_class_ok, _type=_type, _id=_id, _issubclass=_issubclass, _PLAIN=_PLAIN,
             _CONTAINERS=_CONTAINERS, _set=_set, _map=_map, _next=_next, _list=list, _tuple=tuple, _dict=dict,
             _frozenset=frozenset):
    """No object in `value` (followed through builtin containers, each once) is of a class that
    decides comparisons or truth with its own (program-made) code."""
    todo, seen = [value], _set()
    while todo:
        item = todo.pop()
        cls = _type(item)
        if cls in _PLAIN:
            continue
        if cls not in _CONTAINERS:
            if not _class_ok(cls, cache):
                return False
            base = _next((b for b in (_list, _tuple, _dict, _set, _frozenset) if _issubclass(cls, b)), None)
            if base is None:
                continue
            item, cls = base(item), base  # a builtin subclass that decides nothing itself: its contents
        if _id(item) in seen:
            continue
        seen.add(_id(item))
        if cls is _dict:
            todo.extend(item.keys())
            todo.extend(item.values())
        elif not _set(_map(_type, item)) <= _PLAIN:
            todo.extend(item)
    return True


def _cmp(op, left, right, _trusted=_trusted, _type=_type, _tp_name=_tp_name, _TypeError=TypeError):
    cache = {}
    if _trusted(left, cache) != _trusted(right, cache):
        # One side is a program-made value that decides comparisons itself: unequal to any
        # builtin value, whatever its methods say; unordered.
        if op in ("==", "in"):
            return False
        if op in ("!=", "not in"):
            return True
        raise _TypeError("%s between a builtin value and a %s, whose class decides comparisons itself"
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


def _truth(value, _trusted=_trusted, _type=_type, _tp_name=_tp_name, _bool=bool, _TypeError=TypeError):
    if not _trusted(value, {}):
        raise _TypeError("the truth of a %s, whose class decides truth itself, is not accepted as a test result"
                        % _tp_name(_type(value)))
    return _bool(value)


def _cut(text, n=200):
    return text if _len(text) <= n else text[: n - 3] + "..."


def _safe_repr(value):
    try:
        text = _repr(value)
        return _cut(text) if _type(text) is _str else "?"
    except _BaseException:
        return "<%s>" % _tp_name(_type(value))


def _call(fn_name, args, expected, label, _cmp=_cmp, _state=_state, _type=_type, _len=_len):
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

    __exit__ = None  # made per run by _make_exit


def _exit_template(self, kind, e, tb, _getframe=_sys._getframe, _write=_os.write, _dumps=_json.dumps,
                   _describe=None, _classify=None, _progress=_progress, _case=_Case,
                   _type=_type, _int=int, _exit=_os._exit):
    """`_Case.__exit__`: writes the test's verdict, but only when called by the tests function
    at the bottom of its thread (a `with` of the tests). "@@TAG@@", "@@FD@@" and "@@TESTS@@"
    are replaced by the run's tag, output fd and tests code object (constants, so no object the
    program can reach holds them); everything else it uses is bound here, before the program runs."""
    detail = _describe(e)  # may run the program's code (its exception's __str__)
    frame, tests_code = _getframe(1), "@@TESTS@@"
    if frame.f_code is not tests_code or frame.f_back is not None:
        return True
    index = self.i
    if _type(index) is not _int:
        return True
    status, detail = _classify(e, detail)
    if index >= 0:
        record = {"test": index, "status": status, "detail": detail}
    elif status != "passed":
        record = {"phase": "solution.py" if index == -1 else "setup", "status": status, "detail": detail}
        _case.failed = True
    else:
        record = None
    if record is not None:
        _write("@@FD@@", ("@@TAG@@" + _dumps(record) + "\n").encode())
    _progress.append(index)
    if index == -2 or _case.failed:
        # The tests are over: end the process here rather than wake the main thread (a wake-up
        # costs milliseconds on a busy machine). The program's atexit hooks and unflushed
        # stdout do not run; neither ever counted.
        _write("@@FD@@", ("@@TAG@@" + _dumps({"done": True}) + "\n").encode())
        _exit(0)
    return True


def _make_exit(tag, fd, tests_code):
    """The run's `_Case.__exit__`, with its constants in place."""
    code = _exit_template.__code__
    marks = {"@@TAG@@": tag, "@@FD@@": fd, "@@TESTS@@": tests_code}
    consts = _tuple(marks.get(c, c) if _type(c) is _str else c for c in code.co_consts)
    defaults = _exit_template.__defaults__
    defaults = defaults[:3] + (_describe, _classify) + defaults[5:]
    _Case.__exit__ = _FunctionType(code.replace(co_consts=consts), globals(), "__exit__", defaults)
    return _Case.__exit__


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
    ns = _state["ns"]
    exec(compile(_state.pop("code"), _state["path"], "exec", dont_inherit=True), ns)
    for name, (module, _) in _state["modules"].items():
        _sys.modules[name] = module  # the setup imports what was there before the program ran
    setup = _state.pop("setup")
    if setup is not None:
        setup_ns = dict(ns)
        before = {k: _id(v) for k, v in setup_ns.items()}
        setup_ns.update(_state["guards"])
        exec(setup, setup_ns)
        bound = {k: v for k, v in setup_ns.items() if before.get(k) != _id(v) and k not in _state["guards"]}
        ns.update(bound)
        _state["names"] = bound
    tests_module = _state.pop("tests_module")
    if tests_module is not None:
        exec(tests_module, _state["tns"])
    entry = _state["entry"]
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
