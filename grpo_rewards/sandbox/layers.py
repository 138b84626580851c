"""Linux isolation primitives for the sandbox zygote, through ctypes system calls.

Hand-written on ctypes rather than a binding from PyPI: the zygote must stay a small
standard-library-only process (it is started with `python -I` and never imports the project,
torch or anything heavy), and the calls are few (unshare, mount, prctl, capset, Landlock's three).
Every function raises OSError with the call's name when the kernel refuses, so that the
zygote's probe can say exactly which layer is missing and why.
"""

from __future__ import annotations

import ctypes
import os
import resource
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18

PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def setns(fd: int, nstype: int) -> None:
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def prctl(option: int, arg: int = 0) -> None:
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)), f"prctl {option}")


def write_id_maps(uid: int, gid: int) -> None:
    """After unshare(CLONE_NEWUSER) as a non-root user: map our own ids into the new namespace."""
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def drop_capabilities() -> None:
    """Empty the bounding, effective, permitted and inheritable sets (for a non-root process that
    holds capabilities inside its own user namespace: a uid change would not clear them)."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) < 0:
            break  # past the last capability this kernel knows
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = bytes(24)  # two {effective, permitted, inheritable} triples, all empty
    _check(_libc.capset(header, data), "capset")


def set_rlimits(limits: dict[str, int | tuple[int, int]]) -> None:
    """Soft and hard limits (one value: both), so the program cannot raise them back."""
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), value if isinstance(value, tuple) else (value, value))


def drop_to_uid(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # from root to non-root: the kernel clears every capability
    if os.getuid() != uid or os.geteuid() != uid:
        raise OSError(0, "uid drop did not take effect")


# --- Landlock (Linux 5.13+; network rules with ABI 4, signal/abstract-socket scoping with ABI 6)

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_RULE_PATH_BENEATH = 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_ALL_ABI1 = (1 << 13) - 1
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FILE_ONLY = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is absent or disabled."""
    ret = _libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(0, int(ret))


def landlock_features(abi: int) -> list[str]:
    features = ["filesystem"] if abi >= 1 else []
    if abi >= 4:
        features.append("tcp bind/connect")
    if abi >= 6:
        features.append("signal + abstract-socket scoping")
    return features


def landlock_restrict(read_paths: list[str], write_paths: list[str], abi: int) -> None:
    """Allow reading (and executing) beneath `read_paths`, everything beneath `write_paths`,
    nothing else on the filesystem; deny TCP bind/connect (ABI 4+) and signals or abstract
    unix sockets towards processes outside this domain (ABI 6+). Needs no_new_privs."""
    handled_fs = _FS_ALL_ABI1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    handled_fs |= _FS_IOCTL_DEV if abi >= 5 else 0
    fields = [handled_fs]
    if abi >= 4:
        fields.append(_NET_BIND_TCP | _NET_CONNECT_TCP)
    if abi >= 6:
        fields.append(_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL)
    attr = struct.pack(f"{len(fields)}Q", *fields)
    ruleset = _check(_libc.syscall(_SYS_CREATE_RULESET, attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)),
                     "landlock_create_ruleset")
    try:
        read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
        for path, access in [*((p, read) for p in read_paths), *((p, handled_fs) for p in write_paths)]:
            _landlock_allow(ruleset, path, access)
        _check(_libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _landlock_allow(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path this host does not have needs no rule
    try:
        if not os.path.isdir(path):
            access &= _FILE_ONLY  # directory rights on a file are EINVAL
        rule = struct.pack("=Qi", access, fd)  # struct landlock_path_beneath_attr is packed
        _check(_libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), rule,
                             ctypes.c_uint32(0)), f"landlock_add_rule {path}")
    finally:
        os.close(fd)
