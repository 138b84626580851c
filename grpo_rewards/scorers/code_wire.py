"""What crosses between the program's process and the tests' process of `code_tests`: plain data.

Standard library only: this file runs as source in both sandbox processes (see code_runtime.py
and code_program_side.py) and is imported by the project for its own tests.

Plain data is exact `None`, `bool`, `int`, `float`, `complex`, `str`, `bytes` and `list`,
`tuple`, `dict`, `set`, `frozenset` of them. It travels as JSON whose arrays are tagged nodes;
`decode` builds only those exact types (never a class the sender names), so whatever the
program's process sends, the tests' process holds nothing but plain data and `Handle` numbers
(objects that stay in the program's process).
"""

import base64 as _b64
import builtins as _builtins
import json as _json
import struct as _struct

_PLAIN = (type(None), bool, int, str)
_SCALARS = frozenset((type(None), bool, int, str))
_DECODED_SCALARS = _SCALARS | {float}  # JSON numbers are finite floats
_HEADER = _struct.Struct("!I")
MAX_DEPTH = 200  # nesting a value may have; deeper values do not cross
MAX_CONTAINERS = 20_000  # lists, tuples, dicts, sets a value may hold in all; larger values do not cross
REPORT_PREFIX = "@@grpo@@"  # starts each line of the tests' verdicts on their stdout


class _Timeout(BaseException):
    """A run past its limit, on either side (both run this file as their prelude)."""


class ExceptionClass:
    """An exception class of the program's, by name and nearest builtin base (`["X", name, base]`
    on the wire): the tests' side has a class of its own for it."""

    __slots__ = ("name", "base")

    def __init__(self, name, base):
        self.name, self.base = name, base


class NotPlainData(TypeError):
    """A value that cannot cross the boundary; its message names the type. Each one made is kept
    in `made` (the tests' side clears it for each test): a test that met one fails even when it
    caught it, so `pytest.raises(TypeError)` never counts a refusal as the program's TypeError."""

    made = []

    def __init__(self, *args):
        super().__init__(*args)
        NotPlainData.made.append(self)


class Ref:
    """An object that stays in the program's process, by number (`["H", id, type name, truthy]`
    on the wire). `truthy`: its class leaves truth to Python's default (always true). `value`:
    plain data that stands for it in comparisons (a namedtuple's tuple, a ChainMap's dict), sent
    with it (`["V", value, id, type name]`)."""

    __slots__ = ("id", "type_name", "truthy", "value")

    def __init__(self, id, type_name, truthy=False, value=None):
        self.id, self.type_name, self.truthy, self.value = id, type_name, truthy, value


def encode(value, handle_of=None):
    """`value` as tagged JSON text. `handle_of(obj)`, for an object that is not plain data: a `Ref`
    (the program's side keeps the object) or plain data standing in for it; without it such an
    object raises NotPlainData."""
    return _ENCODE(_tagged(value, handle_of, 0, [MAX_CONTAINERS]))


# Made once: json.dumps makes an encoder for each call that asks for separators.
_ENCODE = _json.JSONEncoder(separators=(",", ":")).encode


def _tagged(v, handle_of, depth, budget):
    t = type(v)
    if t in _PLAIN:
        return v
    if depth > MAX_DEPTH:
        raise NotPlainData("a value nested more than %d deep" % MAX_DEPTH)
    d = depth + 1
    if t is float:
        return v if v - v == 0 else ["f", repr(v)]  # nan and inf are not JSON
    if t is list or t is tuple or t is set or t is frozenset or t is dict:
        budget[0] -= 1
        if budget[0] < 0:
            raise NotPlainData("a %s holding more than %d containers in all" % (t.__name__, MAX_CONTAINERS))
        if t is dict:
            out = ["D"]
            for k, x in v.items():
                out += (_tagged(k, handle_of, d, budget), _tagged(x, handle_of, d, budget))
            return out
        if set(map(type, v)) <= _SCALARS:
            return [_CONTAINER_TAG[t], *v]
        return [_CONTAINER_TAG[t], *[_tagged(x, handle_of, d, budget) for x in v]]
    if t is bytes:
        return ["B", _b64.b64encode(v).decode("ascii")]
    if t is complex:
        return ["C", _tagged(v.real, None, d, budget), _tagged(v.imag, None, d, budget)]
    if t is Ref:
        if v.value is not None:
            return ["V", _tagged(v.value, handle_of, d, budget), v.id, v.type_name]
        return ["H", v.id, v.type_name, bool(v.truthy)]
    if t is ExceptionClass:
        return ["X", str(v.name), str(v.base)]
    if t is type and getattr(_builtins, v.__name__, None) is v:
        return ["Y", v.__name__]  # a builtin class (an annotation, a type check): the other side's own
    stand_in = handle_of(v) if handle_of is not None else None
    if stand_in is None:
        raise NotPlainData("a %s is not plain data" % t.__name__)
    return _tagged(stand_in, handle_of, d, budget)  # a Ref, or plain data standing in for `v`


_CONTAINER_TAG = {list: "L", tuple: "T", set: "S", frozenset: "F"}
_BUILD = {"L": list, "T": tuple, "S": set, "F": frozenset}
_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def decode(text, make_handle):
    """Plain data from tagged JSON text; `["H", id, name, truthy]` becomes `make_handle(id, name,
    truthy)`, `["V", value, id, name]` `make_handle(id, name, True, value)`, `["X", name, base]`
    `make_handle(None, name, False, base)`; `["Y", name]` is
    this side's builtin class of that name.
    Raises ValueError for anything that is not a well-formed value."""
    try:
        return _build(_json.loads(text), make_handle, 0)
    except RecursionError:
        raise ValueError("a value nested too deep") from None
    except TypeError as exc:  # an unhashable key or set member (a list, a handle)
        raise ValueError("a set member or dict key that cannot be hashed: %s" % exc) from None


def _build(node, make_handle, depth):
    t = type(node)
    if t in _PLAIN or t is float:
        return node
    if t is not list or not node or type(node[0]) is not str or depth > MAX_DEPTH + 1:
        raise ValueError("not a tagged value")
    tag, items, d = node[0], node[1:], depth + 1
    kind = _BUILD.get(tag)
    if kind is not None:
        if set(map(type, items)) <= _DECODED_SCALARS:
            return kind(items)
        return kind([_build(x, make_handle, d) for x in items])
    if tag == "D" and len(items) % 2 == 0:
        built = [_build(x, make_handle, d) for x in items]
        return dict(zip(built[::2], built[1::2]))
    if tag == "f" and len(items) == 1 and items[0] in _FLOATS:
        return _FLOATS[items[0]]
    if tag == "B" and len(items) == 1 and type(items[0]) is str:
        return _b64.b64decode(items[0].encode("ascii"), validate=True)
    if tag == "C" and len(items) == 2:
        return complex(float(_build(items[0], None, d)), float(_build(items[1], None, d)))
    if tag == "H" and len(items) == 3 and type(items[0]) is int and type(items[1]) is str and make_handle:
        return make_handle(items[0], items[1][:100], items[2] is True)
    if tag == "V" and len(items) == 3 and type(items[1]) is int and type(items[2]) is str and make_handle:
        return make_handle(items[1], items[2][:100], True, _build(items[0], make_handle, d))
    if tag == "X" and len(items) == 2 and type(items[0]) is str and type(items[1]) is str and make_handle:
        return make_handle(None, items[0][:100], False, items[1][:100])
    if tag == "Y" and len(items) == 1 and type(items[0]) is str:
        found = getattr(_builtins, items[0], None)
        if type(found) is type:
            return found
    raise ValueError("unknown tag %r" % tag[:20])


def frame(text):
    """`text` as one frame of a channel (what `Channel.receive` returns on the other side)."""
    data = text.encode("utf-8", "surrogatepass")
    return _HEADER.pack(len(data)) + data


class Channel:
    """Length-prefixed frames over a connected socket. Bytes read are kept in the channel, so
    a frame interrupted by a signal (a test's time limit) is finished by the next read."""

    def __init__(self, sock):
        self.sock, self.buf = sock, bytearray()

    def send(self, text):
        self.sock.sendall(frame(text))

    def receive(self):
        """The next frame's text; EOFError when the other side is gone."""
        while True:
            if len(self.buf) >= 4:
                (n,) = _HEADER.unpack_from(self.buf)
                if len(self.buf) >= 4 + n:
                    data = bytes(self.buf[4 : 4 + n])
                    del self.buf[: 4 + n]
                    return data.decode("utf-8", "surrogatepass")
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise EOFError("the other process closed the channel")
            self.buf += chunk
