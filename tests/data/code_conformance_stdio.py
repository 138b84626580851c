# Conformance programs for code_tests' stdin/stdout path (read by tests/test_code_conformance.py).
# Each entry: name -> (program, [(stdin, expected stdout)]). The suite derives a case with a wrong
# expected output from each.
CASES = {
    "input_sum": ("a, b = map(int, input().split())\nprint(a + b)", [("1 2\n", "3\n"), ("-5 5\n", "0\n")]),
    "input_to_eof": ("total = 0\nwhile True:\n    try:\n        total += int(input())\n    except EOFError:\n        break\n"
                     "print(total)", [("1\n2\n3\n", "6\n"), ("", "0\n")]),
    "stdin_read": ("import sys\ndata = sys.stdin.read().split()\nprint(sum(map(int, data)))", [("1 2\n3\n", "6\n")]),
    "stdin_readline": ("import sys\nn = int(sys.stdin.readline())\nprint(sum(int(sys.stdin.readline()) for _ in range(n)))",
                       [("2\n5\n6\n", "11\n")]),
    "stdin_iter": ("import sys\nfor line in sys.stdin:\n    print(line.strip()[::-1])", [("ab\ncd\n", "ba\ndc\n")]),
    "stdin_readlines": ("import sys\nlines = sys.stdin.readlines()\nprint(len(lines))", [("a\nb\nc\n", "3\n"), ("x", "1\n")]),
    "stdin_buffer": ("import sys\nraw = sys.stdin.buffer.read()\nprint(len(raw))", [("héllo", "6\n")]),
    "open_zero": ("data = open(0).read().split()\nprint(max(map(int, data)))", [("3 9 2\n", "9\n")]),
    "print_end_sep": ("print(1, 2, 3, sep=',', end=';')\nprint('x', end='')\nprint()\nprint('a', 'b', sep='')",
                      [("", "1,2,3;x\nab\n")]),
    "annotations": ("def g(x: int) -> str:\n    pass\nprint(g.__annotations__)",
                    [("", "{'x': <class 'int'>, 'return': <class 'str'>}\n")]),
    "print_star": ("xs = list(map(int, input().split()))\nprint(*sorted(xs))", [("3 1 2\n", "1 2 3\n")]),
    "stdout_write": ("import sys\nsys.stdout.write('no newline')", [("", "no newline")]),
    "print_flush": ("import sys\nfor i in range(3):\n    print(i, flush=True)\nsys.stdout.flush()", [("", "0\n1\n2\n")]),
    "unicode_out": ("print('日本語 ✓ é')\nprint(input()[::-1])", [("añb\n", "日本語 ✓ é\nbña\n")]),
    "large_output": ("print('x' * 999 + '\\n', end='')\nfor _ in range(900):\n    print('y' * 999)", [("", "x" * 999 + "\n" + ("y" * 999 + "\n") * 900)]),
    "over_output_cap": ("while True:\n    print('z' * 1000)", [("", "z\n")]),
    "nonzero_exit": ("import sys\nprint('partial')\nsys.exit(3)", [("", "partial\n")]),
    "exit_zero_early": ("import sys\nprint('done')\nsys.exit(0)\nprint('never')", [("", "done\n")]),
    "exception": ("print(1)\nraise RuntimeError('boom')", [("", "1\n")]),
    "timeout_sleep": ("import time\ntime.sleep(30)\nprint(1)", [("", "1\n")]),
    "main_guard": ("def main():\n    print(int(input()) * 2)\nif __name__ == '__main__':\n    main()", [("21\n", "42\n")]),
    "recursion_thread": ("import sys, threading\nsys.setrecursionlimit(1 << 16)\nthreading.stack_size(1 << 26)\n"
                         "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
                         "def main():\n    print(depth(int(input())))\nt = threading.Thread(target=main)\nt.start()\nt.join()",
                         [("20000\n", "20000\n")]),
    "trailing_spaces": ("print('a b ')\nprint()\nprint()", [("", "a b\n")]),
    "float_out": ("print(f'{1/3:.6f}')", [("", "0.333333\n")]),
    "dataclass_main": ("from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\nprint(P(int(input())))",
                       [("4\n", "P(x=4)\n")]),
    "pickle_main": ("import pickle\nclass P:\n    def __init__(self, v):\n        self.v = v\n"
                    "print(pickle.loads(pickle.dumps(P(input()))).v)", [("hi\n", "hi\n")]),
    "stderr_noise": ("import sys\nprint('err', file=sys.stderr)\nprint('out')", [("", "out\n")]),
    "asyncio_main": ("import asyncio\nasync def main():\n    await asyncio.sleep(0)\n    print('async', input())\nasyncio.run(main())",
                     [("ok\n", "async ok\n")]),
    "input_prompt": ("name = input('name? ')\nprint('hi', name)", [("bo\n", "name? hi bo\n")]),
}
