"""The assertion-test harness as it runs INSIDE the sandbox (never imported by the project):
the main thread's part. code_runtime_thread.py is the part that runs in the program's thread.

`code_harness.harness_program` ships both with the candidate program, the reference's setup and
the compiled tests (the local sandbox gets both parts as the job's library, bytecode decoded once
per worker); `_main(data, load)` runs them.

Two threads. The main thread never runs the program: it writes the solution file, imports what
the setup will import, installs the audit hook, starts the program's thread and waits for it,
enforcing each test's time limit. That thread runs the program (as a real module), the setup
and the tests; its bottom frame is the tests function itself, so no frame of it leads back to
the main thread. Each test's `with _grpo_case(i):` exit writes the verdict, with the per-run tag
that exists there only as a constant of `_Case.__exit__`, and only when called by the tests
function at the bottom of the stack: a program that calls `__exit__` itself or prints lines
gets no verdict it did not earn. The audit hook (which nothing can remove) keeps frames, code
objects of the harness, gc, tracing, ctypes, /proc and new audit hooks out of the program's
reach; see docs/sandbox.md for what it allows and why.
"""

import _thread
import builtins as _bi
import json as _json
import linecache as _linecache
import os as _os
import sys as _sys
import time as _time
import types as _types

_getframe, _get_ident = _sys._getframe, _thread.get_ident
_type, _id, _str, _len = type, id, str, len
_BaseException = BaseException
_FunctionType, _ModuleType = _types.FunctionType, _types.ModuleType
_tp_dict = type.__dict__["__dict__"].__get__

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


def _definitions(*namespaces):
    return [f for ns in namespaces for f in ns.values() if _type(f) in (_FunctionType, type)]


def _collect_from_class(cls):
    for value in _tp_dict(cls).values():
        if _type(value) is _FunctionType:
            _trusted_funcs.add(_id(value))
            yield value.__code__


# ---- comparisons in tests: a builtin value is never compared with a program-made impostor ----


def _interrupt(tid, timeout_class):
    import ctypes  # only when a test overruns: importing it costs milliseconds per run

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(timeout_class))


def _main(data, load):
    tag, out = data.pop("tag"), _os.dup(1)

    def report(**record):
        _os.write(out, (tag + _json.dumps(record) + "\n").encode())

    try:
        _os.unlink(_sys.argv[0])  # the harness file holds the tag
    except OSError:
        pass
    path = _os.path.join(_os.getcwd(), "solution.py")
    # The source as `python solution.py` has it: for inspect.getsource and tracebacks (linecache),
    # and on disk when this is a fresh run directory (a backend that runs us in its own working
    # directory gets no file written there).
    _linecache.cache[path] = (_len(data["code"]), None, data["code"].splitlines(True), path)
    if not _os.listdir("."):
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(data["code"])
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
    side = load("thread.py")
    if _type(side) is not dict:  # not made by the worker (see _WARM_SIDE): made here
        code, side = side, {"__builtins__": dict(_bi.__dict__), "__name__": "thread"}
        exec(code, side)  # builtins as they are now
    scratch = {"__builtins__": _bi}
    exec(load("tests.py"), scratch)
    tests_code = scratch["_grpo_tests"].__code__
    tests = _FunctionType(tests_code, module.__dict__, "_grpo_tests")
    pristine = _types.MappingProxyType(dict(_bi.__dict__))
    guards = {"_grpo_cmp": side["_cmp"], "_grpo_truth": side["_truth"], "_grpo_b": pristine}
    tns = {"__name__": "test_solution", "__builtins__": _bi, **guards}
    side["_state"].update(ns=module.__dict__, guards=guards, names={}, tns=tns, path=path, modules=modules,
                          limit=data["limit"], code=data["code"], entry=data["entry_point"],
                          setup=load("setup.py") if data["has_setup"] else None,
                          tests_module=load("test_solution.py") if data["pytest"] else None)
    exit_function = side["_make_exit"](tag, out, tests_code)
    side["_finished"].acquire()
    _collect_trusted([report, exit_function] + ([] if side is _WARM_SIDE else _definitions(globals(), side)))
    _sys.addaudithook(_audit)
    tid = _thread.start_new_thread(tests, (side["_Case"], side["_load_program"], side["_cmp"], side["_truth"],
                                           side["_call"], pristine, side["_run_pytest_item"]))
    _wait(tid, data["ntests"], data["limit"], side, report)
    report(done=True)


def _wait(tid, ntests, limit, side, report):
    """Until the tests end; a test that overruns its limit (from the previous verdict) is
    interrupted, and one that does not stop ends the run."""
    progress, finished = side["_progress"], side["_finished"]
    seen, interrupted = 0, False
    deadline = _time.monotonic() + limit
    while True:
        if finished.acquire(timeout=max(0.0, min(deadline - _time.monotonic(), 0.25))):
            return
        now = _time.monotonic()
        if _len(progress) != seen:
            seen, interrupted, deadline = _len(progress), False, now + limit
            continue
        if now < deadline:
            continue
        if not interrupted:
            _interrupt(tid, side["_Timeout"])
            interrupted, deadline = True, now + min(1.0, limit)
            continue
        done = {i for i in list(progress) if _type(i) is int}  # the program may have added anything
        if -1 not in done:
            report(phase="solution.py", status="timeout", detail="over %g s" % limit)
        else:
            index = next((i for i in range(ntests) if i not in done), None)
            if index is not None:
                report(test=index, status="timeout", detail="over %g s; later tests did not run" % limit)
        report(done=True)
        _os._exit(0)


# Made in the local sandbox's worker, once (its executor's warm library parts): this part, then
# with the program thread's part given in `__warm__`, so both parts' functions and what is
# trusted of them exist before any run; each run's child has them as they were made.
_WARM_SIDE = globals().get("__warm__", {}).get("thread.py")
if _WARM_SIDE is not None:
    _collect_trusted(_definitions(globals(), _WARM_SIDE))
