# Conformance programs for code_tests' assertion path (read by tests/test_code_conformance.py).
# Each entry: name -> (program, [test statements]); tests call the program's `f`.
# The suite derives more cases from each (a wrong expected value; a program that raises).
CASES = {
    "dataclass": ("from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\n    y: int = 0\n"
                  "def f(a):\n    return P(a, a).x + P(a).y", ["assert f(1) == 1", "assert f(5) == 5"]),
    "dataclass_order": ("from dataclasses import dataclass\n@dataclass(frozen=True, order=True)\nclass P:\n    x: int\n"
                        "def f(a):\n    return sorted([P(3), P(a)])[0].x", ["assert f(1) == 1", "assert f(9) == 3"]),
    "dataclass_eq_same_class": ("from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\ndef f(a):\n    return P(a)",
                                ["assert f(1) == P(1)", "assert f(2) != P(3)"]),
    "pickle_class": ("import pickle\nclass P:\n    def __init__(self, x):\n        self.x = x\n"
                     "def f(a):\n    return pickle.loads(pickle.dumps(P(a))).x", ["assert f(3) == 3", "assert f(0) == 0"]),
    "pickle_dataclass": ("import pickle, dataclasses\n@dataclasses.dataclass\nclass Q:\n    v: list\n"
                         "def f(a):\n    return pickle.loads(pickle.dumps(Q([a]))).v", ["assert f(3) == [3]"]),
    "namedtuple": ("from collections import namedtuple\nPt = namedtuple('Pt', 'x y')\ndef f(a):\n    return Pt(a, a + 1)",
                   ["assert f(1) == (1, 2)", "assert f(2).y == 3"]),
    "typing_namedtuple": ("from typing import NamedTuple\nclass Pt(NamedTuple):\n    x: int\n    y: int = 0\n"
                          "def f(a):\n    return Pt(a)", ["assert f(1) == (1, 0)", "assert f(4).x == 4"]),
    "enum": ("import enum\nclass Color(enum.Enum):\n    RED = 1\n    BLUE = 2\ndef f(a):\n    return Color(a).name",
             ["assert f(1) == 'RED'", "assert f(2) == 'BLUE'"]),
    "intenum": ("import enum\nclass N(enum.IntEnum):\n    ONE = 1\n    TWO = 2\ndef f(a):\n    return N(a)",
                ["assert f(1) == 1", "assert f(2) + 1 == 3"]),
    "functools_cache": ("import functools\n@functools.cache\ndef f(n):\n    return n if n < 2 else f(n - 1) + f(n - 2)",
                        ["assert f(30) == 832040", "assert f(1) == 1"]),
    "lru_cache": ("from functools import lru_cache\n@lru_cache(maxsize=None)\ndef f(n):\n    return 1 if n == 0 else n * f(n - 1)",
                  ["assert f(10) == 3628800", "assert f(0) == 1"]),
    "generator": ("def gen(n):\n    for i in range(n):\n        yield i * i\ndef f(n):\n    return list(gen(n))",
                  ["assert f(4) == [0, 1, 4, 9]", "assert f(0) == []"]),
    "generator_send": ("def acc():\n    total = 0\n    while True:\n        total += yield total\n"
                       "def f(xs):\n    g = acc()\n    next(g)\n    for x in xs:\n        r = g.send(x)\n    return r",
                       ["assert f([1, 2, 3]) == 6"]),
    "asyncio_run": ("import asyncio\nasync def double(x):\n    await asyncio.sleep(0)\n    return 2 * x\n"
                    "def f(a):\n    return asyncio.run(double(a))", ["assert f(2) == 4", "assert f(-1) == -2"]),
    "asyncio_gather": ("import asyncio\nasync def sq(x):\n    await asyncio.sleep(0.001)\n    return x * x\n"
                       "async def main(xs):\n    return await asyncio.gather(*(sq(x) for x in xs))\n"
                       "def f(xs):\n    return asyncio.run(main(xs))", ["assert f([1, 2, 3]) == [1, 4, 9]"]),
    "slots": ("class P:\n    __slots__ = ('x',)\n    def __init__(self, x):\n        self.x = x\n"
              "def f(a):\n    p = P(a)\n    try:\n        p.y = 1\n    except AttributeError:\n        return p.x\n    return -1",
              ["assert f(7) == 7"]),
    "recursion_limit": ("import sys\nsys.setrecursionlimit(10000)\ndef f(n):\n    return 0 if n == 0 else 1 + f(n - 1)",
                        ["assert f(5000) == 5000", "assert f(3) == 3"]),
    "recursion_error": ("def f(n):\n    return f(n + 1)", ["assert f(0) == 1"]),
    "type_hints": ("import typing\ndef f(a: int, b: 'str' = '') -> typing.List[int]:\n    return [a]\n",
                   ["assert typing.get_type_hints(f)['a'] is int", "assert f(2) == [2]"]),
    "annotations_evaluated": ("def f(a: int) -> list:\n    return f.__annotations__",
                              ["assert f(1)['a'] is int", "assert f(1)['return'] is list"]),
    "annotations_postponed": ("from __future__ import annotations\ndef f(a: int) -> list:\n    return f.__annotations__",
                              ["assert f(1)['a'] == 'int'", "assert f(1)['a'] is int"]),
    "getsource": ("import inspect\ndef f(a):\n    return len(inspect.getsource(f).splitlines())",
                  ["assert f(0) == 2"]),
    "relative_file": ("with open('notes.txt', 'w') as fh:\n    fh.write('3\\n4\\n')\n"
                      "def f(a):\n    with open('notes.txt') as fh:\n        return a + sum(map(int, fh))",
                      ["assert f(1) == 8", "assert f(0) == 7"]),
    "threads": ("import threading\ndef f(n):\n    out = []\n    lock = threading.Lock()\n    def work(i):\n"
                "        with lock:\n            out.append(i)\n    ts = [threading.Thread(target=work, args=(i,)) for i in range(n)]\n"
                "    for t in ts:\n        t.start()\n    for t in ts:\n        t.join()\n    return sorted(out)",
                ["assert f(3) == [0, 1, 2]"]),
    "thread_pool": ("from concurrent.futures import ThreadPoolExecutor\ndef f(xs):\n"
                    "    with ThreadPoolExecutor(2) as ex:\n        return list(ex.map(abs, xs))",
                    ["assert f([-1, 2, -3]) == [1, 2, 3]"]),
    "sys_exit_in_test": ("import sys\ndef f(a):\n    if a < 0:\n        sys.exit(1)\n    return a",
                         ["assert f(1) == 1", "assert f(-1) == -1", "assert f(2) == 2"]),
    "exit_zero_in_test": ("def f(a):\n    if a == 0:\n        exit(0)\n    return a", ["assert f(0) == 0", "assert f(3) == 3"]),
    "main_guard": ("TABLE = {}\ndef f(a):\n    return TABLE.get(a, -1)\nif __name__ == '__main__':\n"
                   "    TABLE.update({1: 10, 2: 20})", ["assert f(1) == 10", "assert f(3) == -1"]),
    "dunder_name": ("def f():\n    return __name__", ["assert f() == '__main__'"]),
    "raise_in_test": ("def f(a):\n    if a == 2:\n        raise ValueError('two')\n    return a",
                      ["assert f(1) == 1", "assert f(2) == 2", "assert f(3) == 3"]),
    "key_error": ("def f(d, k):\n    return d[k]", ["assert f({'a': 1}, 'a') == 1", "assert f({}, 'x') is None"]),
    "timeout_loop": ("def f(a):\n    while a > 0:\n        pass\n    return a", ["assert f(0) == 0", "assert f(1) == 1",
                                                                               "assert f(0) == 0"]),
    "isclose": ("def f(a):\n    return a / 3", ["import math\nassert math.isclose(f(1), 0.3333333333)",
                                                   "assert abs(f(3) - 1) < 1e-9"]),
    "strings": ("def f(s):\n    return s.strip().title().replace(' ', '_')",
                ["assert f('  hello world ') == 'Hello_World'", "assert f('') == ''"]),
    "comprehensions": ("def f(n):\n    return {i: [j for j in range(i)] for i in range(n)}",
                       ["assert f(3) == {0: [], 1: [0], 2: [0, 1]}"]),
    "sorted_key": ("def f(xs):\n    return sorted(xs, key=lambda p: (-p[1], p[0]))",
                   ["assert f([('a', 1), ('b', 2), ('c', 2)]) == [('b', 2), ('c', 2), ('a', 1)]"]),
    "bisect_heapq": ("import bisect, heapq\ndef f(xs, x):\n    h = list(xs)\n    heapq.heapify(h)\n"
                     "    s = sorted(xs)\n    return bisect.bisect_left(s, x), heapq.heappop(h)",
                     ["assert f([5, 1, 3], 3) == (1, 1)"]),
    "itertools": ("import itertools\ndef f(s):\n    return [''.join(p) for p in itertools.permutations(s)]",
                  ["assert f('ab') == ['ab', 'ba']", "assert len(f('abcd')) == 24"]),
    "counter": ("from collections import Counter\ndef f(s):\n    return Counter(s)",
                ["assert f('aab') == {'a': 2, 'b': 1}", "assert f('')== {}"]),
    "defaultdict_deque": ("from collections import defaultdict, deque\ndef f(edges):\n    g = defaultdict(list)\n"
                          "    for a, b in edges:\n        g[a].append(b)\n    seen, q = [0], deque([0])\n    while q:\n"
                          "        for n in g[q.popleft()]:\n            if n not in seen:\n                seen.append(n)\n"
                          "                q.append(n)\n    return seen", ["assert f([(0, 1), (1, 2), (0, 3)]) == [0, 1, 3, 2]"]),
    "fraction": ("from fractions import Fraction\ndef f(a, b):\n    return Fraction(a, b)",
                 ["assert f(1, 2) == 0.5", "assert f(2, 4) == Fraction(1, 2)"]),
    "decimal": ("from decimal import Decimal, getcontext\ngetcontext().prec = 6\ndef f(a):\n    return Decimal(1) / Decimal(a)",
                ["assert str(f(7)) == '0.142857'"]),
    "regex": ("import re\ndef f(s):\n    return re.findall(r'\\d+', s)", ["assert f('a1b22c333') == ['1', '22', '333']"]),
    "json": ("import json\ndef f(d):\n    return json.dumps(d, sort_keys=True)", ["assert f({'b': 1, 'a': [1, 2]}) == '{\"a\": [1, 2], \"b\": 1}'"]),
    "math": ("import math\ndef f(a, b):\n    return math.gcd(a, b), math.lcm(a, b), math.comb(a, 2)", ["assert f(4, 6) == (2, 12, 6)"]),
    "bigint": ("def f(n):\n    return 2 ** n", ["assert f(100) == 1267650600228229401496703205376", "assert f(0) == 1"]),
    "bytes": ("def f(s):\n    return s.encode('utf-8')[::-1]", ["assert f('ab') == b'ba'", "assert f('é') == b'\\xa9\\xc3'"]),
    "sets": ("def f(a, b):\n    return set(a) & set(b), frozenset(a) | frozenset(b)",
             ["assert f([1, 2], [2, 3]) == ({2}, frozenset({1, 2, 3}))"]),
    "star_unpack": ("def f(xs):\n    first, *rest = xs\n    return first, rest", ["assert f([1, 2, 3]) == (1, [2, 3])"]),
    "walrus_match": ("def f(x):\n    match x:\n        case [a, b]:\n            return a + b\n        case {'k': v}:\n"
                     "            return v\n        case _:\n            return (n := 0)", ["assert f([1, 2]) == 3", "assert f({'k': 5}) == 5",
                                                                                          "assert f(None) == 0"]),
    "fstrings": ("def f(x):\n    return f'{x:>5}|{x:05.1f}|{x!r}'", ["assert f(2.5) == '  2.5|002.5|2.5'"]),
    "globals_state": ("COUNT = 0\ndef f():\n    global COUNT\n    COUNT += 1\n    return COUNT",
                      ["assert f() == 1", "assert f() == 2"]),
    "closure": ("def f(n):\n    total = 0\n    def add(k):\n        nonlocal total\n        total += k\n"
                "    for i in range(n):\n        add(i)\n    return total", ["assert f(4) == 6"]),
    "inheritance": ("class A:\n    def g(self):\n        return 'A'\nclass B(A):\n    def g(self):\n        return super().g() + 'B'\n"
                    "def f():\n    return B().g()", ["assert f() == 'AB'"]),
    "properties": ("class C:\n    def __init__(self):\n        self._v = 1\n    @property\n    def v(self):\n        return self._v * 2\n"
                   "    @staticmethod\n    def s():\n        return 3\n    @classmethod\n    def c(cls):\n        return cls.__name__\n"
                   "def f():\n    return C().v, C.s(), C.c()", ["assert f() == (2, 3, 'C')"]),
    "abc": ("import abc\nclass Base(abc.ABC):\n    @abc.abstractmethod\n    def g(self): ...\nclass Impl(Base):\n"
            "    def g(self):\n        return 1\ndef f():\n    try:\n        Base()\n    except TypeError:\n        return Impl().g()",
            ["assert f() == 1"]),
    "custom_repr": ("class V:\n    def __init__(self, x):\n        self.x = x\n    def __repr__(self):\n        return f'V({self.x})'\n"
                    "def f(a):\n    return V(a)", ["assert repr(f(3)) == 'V(3)'", "assert str(f(1)) == 'V(1)'"]),
    "contextmanager": ("from contextlib import contextmanager\nLOG = []\n@contextmanager\ndef tag(n):\n    LOG.append('<' + n)\n"
                       "    yield\n    LOG.append(n + '>')\ndef f():\n    LOG.clear()\n    with tag('a'):\n        LOG.append('x')\n    return LOG",
                       ["assert f() == ['<a', 'x', 'a>']"]),
    "custom_exception": ("class Bad(Exception):\n    pass\ndef g(x):\n    if x < 0:\n        raise Bad(x)\n    return x\n"
                         "def f(x):\n    try:\n        return g(x)\n    except Bad:\n        return 0", ["assert f(-3) == 0", "assert f(3) == 3"]),
    "random_seed": ("import random\ndef f(seed):\n    r = random.Random(seed)\n    return [r.randint(0, 9) for _ in range(3)]",
                    ["import random\nr = random.Random(1)\nassert f(1) == [r.randint(0, 9) for _ in range(3)]"]),
    "datetime": ("import datetime\ndef f(y, m, d):\n    return datetime.date(y, m, d).strftime('%A')",
                 ["assert f(2024, 1, 1) == 'Monday'"]),
    "deepcopy": ("import copy\ndef f(x):\n    y = copy.deepcopy(x)\n    y[0].append(9)\n    return x, y",
                 ["assert f([[1]]) == ([[1]], [[1, 9]])"]),
    "operator_zip": ("import operator\ndef f(a, b):\n    return list(map(operator.mul, a, b)), list(enumerate(zip(a, b)))",
                     ["assert f([1, 2], [3, 4]) == ([3, 8], [(0, (1, 3)), (1, (2, 4))])"]),
    "bool_as_int": ("def f(a):\n    return a > 0", ["assert f(1) == 1", "assert f(-1) == 0", "assert f(2)"]),
    "print_in_function": ("def f(a):\n    print('debug', a)\n    return a", ["assert f(1) == 1"]),
    "input_eof": ("def f():\n    return input()", ["assert f() == ''"]),
    "logging_warnings": ("import logging, warnings\nlogging.basicConfig(level=logging.INFO)\ndef f(a):\n"
                         "    logging.info('x=%s', a)\n    warnings.warn('careful')\n    return a", ["assert f(2) == 2"]),
    "typing_generic": ("from typing import Generic, TypeVar\nT = TypeVar('T')\nclass Box(Generic[T]):\n"
                       "    def __init__(self, v: T):\n        self.v = v\ndef f(a):\n    return Box[int](a).v", ["assert f(5) == 5"]),
    "unicode": ("def f(s):\n    return s[::-1] + '✓'", ["assert f('héllo') == 'olléh✓'", "assert len(f('日本')) == 3"]),
    "syntax_error": ("def f(a)\n    return a", ["assert f(1) == 1"]),
    "module_level_error": ("X = 1 / 0\ndef f(a):\n    return a", ["assert f(1) == 1"]),
    "tuple_vs_list": ("def f(a):\n    return (a, a)", ["assert f(1) == [1, 1]", "assert f(1) == (1, 1)"]),
    "float_compare": ("def f(a):\n    return 0.1 + a", ["assert f(0.2) == 0.3", "assert round(f(0.2), 10) == 0.3"]),
    "none_result": ("def f(a):\n    a.sort()", ["assert f([2, 1]) is None", "assert f([1]) == [1]"]),
    "in_operator": ("def f(a):\n    return a * 2", ["assert f(2) in [4, 5]", "assert f(3) not in {6}"]),
    "ordering": ("def f(a):\n    return [a, a + 1]", ["assert f(1) < [1, 3]", "assert f(2) >= [2, 3]"]),
    "string_sort_chain": ("def f(s):\n    return ''.join(sorted(s))", ["assert f('cba') == 'abc' == 'abc'"]),
    "huge_list": ("def f(n):\n    return list(range(n))", ["assert f(200000)[-1] == 199999", "assert len(f(100000)) == 100000"]),
    "os_cwd": ("import os\ndef f():\n    return os.path.isdir(os.getcwd()) and os.access('.', os.W_OK)", ["assert f() is True"]),
    "memo_dict": ("memo = {}\ndef f(n):\n    if n in memo:\n        return memo[n]\n    memo[n] = n if n < 2 else f(n-1) + f(n-2)\n"
                  "    return memo[n]", ["assert f(80) == 23416728348467685"]),
}
