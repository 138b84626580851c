"""Linux isolation primitives for the sandbox workers, through ctypes system calls.

Hand-written on ctypes rather than a binding from PyPI: the zygote must stay a small
standard-library-only process (it is started with `python -I` and never imports the project,
torch or anything heavy), and the calls are few (unshare, mount, prctl, capset, Landlock's three).
Every function raises OSError with the call's name when the kernel refuses, so that the
worker's probe can say exactly which layer is missing and why.
"""

from __future__ import annotations

import ctypes
import functools
import os
import resource
import socket
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


def landlock_restrict(read_paths: list[str], write_paths: list[str], abi: int, reads: bool = True) -> None:
    """Allow reading (and executing) beneath `read_paths`, everything beneath `write_paths`,
    nothing else on the filesystem; deny TCP bind/connect (ABI 4+) and signals or abstract
    unix sockets towards processes outside this domain (ABI 6+). Needs no_new_privs.
    `reads=False`: a layer over one that governs reading already; this one limits the rest."""
    landlock_enforce(landlock_ruleset(read_paths, write_paths, abi, reads))


def landlock_ruleset(read_paths: list[str], write_paths: list[str], abi: int, reads: bool = True) -> int:
    """The ruleset `landlock_restrict` enforces, as a descriptor: made by one process, enforced
    by another that inherits it (the rules hold the paths' inodes, not their names)."""
    handled_fs = _FS_ALL_ABI1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    handled_fs |= _FS_IOCTL_DEV if abi >= 5 else 0
    if not reads:
        handled_fs &= ~(_FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR)
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
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


def landlock_enforce(ruleset: int) -> None:
    """Enforce the ruleset on this process (and its future children); closes the descriptor."""
    try:
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


# --- seccomp: a small deny-list filter (classic BPF), x86_64 only

_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_SYS_CLONE, _SYS_CLONE3, _SYS_SOCKET = 56, 435, 41
_CLONE_NEW_ANY = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | 0x02000000
_EPERM, _ENOSYS, _EAFNOSUPPORT = 1, 38, 97
# The socket families a program may create: the internet ones, which the empty network namespace
# and Landlock leave nothing to reach. Every other family can reach past that namespace (a
# Unix socket connects to a socket file of the host's by its path, vsock to the hypervisor);
# socketpair() is untouched: its two ends know no address.
ALLOWED_SOCKET_FAMILIES = (socket.AF_INET, socket.AF_INET6)
# Kernel surface a test program never needs and exploits often use: namespaces and mounts,
# ptrace and cross-process memory, eBPF, keyrings, perf, userfaultfd, io_uring, modules, kexec;
# System V IPC and POSIX message queues, whose objects live in the worker's IPC namespace and so
# would outlive the run (memory outside every limit, a channel to later samples); and watches
# on files (inotify, fanotify), which would report what the host does in directories the
# program may traverse but not read.
DENIED_SYSCALLS = {
    "ptrace": 101, "syslog": 103, "chroot": 161, "acct": 163, "mount": 165, "umount2": 166, "swapon": 167,
    "swapoff": 168, "reboot": 169, "iopl": 172, "ioperm": 173, "init_module": 175, "delete_module": 176,
    "quotactl": 179, "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
    "perf_event_open": 298, "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320, "bpf": 321,
    "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    "pivot_root": 155,
    "shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66, "shmdt": 67, "msgget": 68,
    "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "semtimedop": 220, "mq_open": 240, "mq_unlink": 241,
    "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245,
    "inotify_init": 253, "inotify_add_watch": 254, "inotify_init1": 294, "fanotify_init": 300, "fanotify_mark": 301,
}


def _bpf(code: int, k: int = 0, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


@functools.lru_cache(maxsize=1)  # built once in the zygote, inherited by every forked run
def seccomp_filter_program() -> bytes:
    """Deny (EPERM) the syscalls above and clone() with namespace flags; clone3 answers ENOSYS
    so that the C library falls back to clone(), whose flags a classic filter can inspect;
    socket() of a family not in ALLOWED_SOCKET_FAMILIES answers EAFNOSUPPORT, as where the
    kernel lacks it. Non-x86_64 calling conventions (the x32 ABI, a foreign arch) are denied outright."""
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    numbers = sorted(DENIED_SYSCALLS.values())
    # (label or None, code, k, jump-true label, jump-false label); "next": the following op
    ops = [(None, ld_abs, 4, None, None), (None, jeq, _AUDIT_ARCH_X86_64, "next", "deny"),
           (None, ld_abs, 0, None, None), (None, jge, _X32_BIT, "deny", "next")]
    ops += [(None, jeq, nr, "deny", "next") for nr in numbers]
    ops += [(None, jeq, _SYS_CLONE3, "enosys", "next"), (None, jeq, _SYS_CLONE, "clone", "next"),
            (None, jeq, _SYS_SOCKET, "socket", "allow"),
            ("clone", ld_abs, 16, None, None),  # args[0], low 32 bits: the clone flags
            (None, jset, _CLONE_NEW_ANY, "deny", "allow"),
            ("socket", ld_abs, 16, None, None)]  # args[0]: the family
    ops += [(None, jeq, family, "allow", "next") for family in ALLOWED_SOCKET_FAMILIES]
    returns = [("eafnosupport", _SECCOMP_RET_ERRNO | _EAFNOSUPPORT), ("allow", _SECCOMP_RET_ALLOW),
               ("deny", _SECCOMP_RET_ERRNO | _EPERM), ("enosys", _SECCOMP_RET_ERRNO | _ENOSYS)]
    at = {label: i for i, (label, *_) in enumerate(ops) if label}
    at.update({label: len(ops) + i for i, (label, _) in enumerate(returns)})
    prog = []
    for i, (_, code, k, jt, jf) in enumerate(ops):
        rel = lambda label: 0 if label in (None, "next") else at[label] - i - 1  # noqa: E731
        prog.append(_bpf(code, k, rel(jt), rel(jf)))
    prog += [_bpf(ret, value) for _, value in returns]
    return b"".join(prog)


@functools.lru_cache(maxsize=1)
def _seccomp_fprog() -> tuple[ctypes.Array, bytes]:
    """(filter buffer, struct sock_fprog pointing at it); kept alive by the cache."""
    if os.uname().machine != "x86_64":
        raise OSError(95, f"the seccomp filter is built for x86_64 only, not {os.uname().machine}")
    program = seccomp_filter_program()
    filters = ctypes.create_string_buffer(program, len(program))
    return filters, struct.pack("HxxxxxxP", len(program) // 8, ctypes.addressof(filters))


def seccomp_restrict() -> None:
    """Install the filter on this process (inherited by its children, irrevocable). Needs no_new_privs."""
    _, fprog = _seccomp_fprog()
    _check(_libc.prctl(ctypes.c_int(_PR_SET_SECCOMP), ctypes.c_ulong(_SECCOMP_MODE_FILTER), ctypes.c_char_p(fprog),
                       ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl(PR_SET_SECCOMP)")
