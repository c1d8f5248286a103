"""What a spec value may contain, given where it ends up: git's command line, supervisord's and systemd's files.

Each check raises ValueError with a message for people; the spec model attaches it to its field, and values read
from an installer (`DS4_REPO`, `DS4_REF`) go through the same checks, because they reach the same commands.
"""
from __future__ import annotations

import re
import unicodedata

# Git transports we mean to use. Everything else (ext::, fd::, http://, git://, a `--option`) is refused here,
# and git itself is run with GIT_ALLOW_PROTOCOL set to the same list (engine/git.py).
GIT_PROTOCOLS = ("https", "ssh", "file")
GIT_URL_SCHEMES = {"https": "https", "ssh": "ssh", "git+ssh": "ssh", "ssh+git": "ssh", "file": "file"}
REPO_FORMS = "https://…, ssh://…, user@host:path (ssh), file://… or a local path"
SCP_LIKE = re.compile(r"^(?:(?P<user>[^@/]*)@)?(?P<host>[^:/]+):")
HOSTNAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$|^\[[0-9A-Fa-f:.]+\]$")
USERNAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")

# paths.root is written unquoted into supervisord.conf ([include] files= is split on whitespace and globbed),
# program files (directory=, stdout_logfile=, where supervisor expands %) and the systemd unit (where systemd
# expands % and $): only characters that mean the same in all of them.
CONFIG_PATH_CHARS = r"\w/.+@,:=~\-"
CONFIG_PATH = re.compile(rf"^[{CONFIG_PATH_CHARS}]+$")
CONFIG_PATH_RAW = re.compile(rf"^[{CONFIG_PATH_CHARS}${{}}]+$")  # before ~, $HOME and ${{VAR}} are expanded
# AF_UNIX socket paths are at most 107 bytes: ROOT/run/supervisor.sock must fit
SOCKET_SUFFIX = "/run/supervisor.sock"
MAX_SOCKET_PATH = 107

PATH_MAX = 4096
NAME_MAX = 255
# the engine's flags a spec field sets; extra_args may not set them again (the engine takes the last one)
MANAGED_FLAGS = {
    "-m": "model.main", "--model": "model.main",
    "--host": "server.host", "--port": "server.port",
    "-c": "server.ctx", "--ctx": "server.ctx",
    "-n": "server.tokens", "--tokens": "server.tokens",
    "-t": "server.threads", "--threads": "server.threads",
    "--warm-weights": "server.warm_weights",
    "--kv-disk-dir": "server.kv_disk_dir", "--kv-disk-space-mb": "server.kv_disk_space_mb",
    "--role": "distributed.role", "--layers": "distributed.layers", "--listen": "distributed.listen",
    "--coordinator": "distributed.coordinator",
    "--mtp": "server.speculative", "--mtp-draft": "server.speculative.draft",
    "--mtp-margin": "server.speculative.margin", "--dspark": "server.speculative",
    "--no-spec": "server.speculative", "--no-mtp": "server.speculative", "--no-dspark": "server.speculative",
    "--power": "server.power",
}
MANAGED_ENV = {"DS4_LOCK_FILE": "one lock file per root and server.name, so two instances never collide"}


class FieldProblem(ValueError):
    """A problem that belongs below the field or model that found it: a cross-field rule, one list item, one
    mapping key (so that FILE:LINE:COL points at it)."""

    def __init__(self, path: str | tuple, message: str):
        super().__init__(message)
        self.path = tuple(path.split(".")) if isinstance(path, str) else tuple(path)


def printable(value: str) -> str:
    """No control characters, line or paragraph separators, or lone surrogates: they cannot be written into an
    INI or unit file, an environment or a command line and read back as the same value."""
    for ch in value:
        if unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp"):
            raise ValueError(f"contains the control character {ch!r}, which cannot be written safely into the "
                             "engine's config and command line")
    return value


def not_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("empty")
    return value


USER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,31}$")


def check_user_name(value: str) -> str:
    """Written as supervisord's user=: a plain account name (the account itself is looked up on the host)."""
    if not USER_NAME.match(value):
        raise ValueError(f"{value[:40]!r} is not a user name (letters, digits, . _ -, at most 32 characters)")
    return value


def canonical_ip(value: str) -> str | None:
    """`value` when it is an IP address written the one way ipaddress writes it; None when it is no address.
    An address written any other way (`010.0.0.1`, octal to inet_aton; `127.000.000.001`; `::0:1`) is refused:
    the engine, a probe and a person would each read it differently."""
    import ipaddress

    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        if re.fullmatch(r"[0-9.]+|0[xX][0-9A-Fa-f.xX]*|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*", value):
            raise ValueError(f"{value[:60]!r} is not an IP address as it is written canonically (no leading "
                             f"zeros, four parts): a resolver reads it as another address") from None
        return None
    if str(address) != value:
        raise ValueError(f"{value[:60]!r} is the address {address}, written another way: write {address}")
    return value


def check_bind_host(value: str) -> str:
    """server.host: the engine binds with inet_pton(AF_INET) or the name 'localhost', nothing else."""
    if value == "localhost":
        return value
    if canonical_ip(value) is None or ":" in value:
        raise ValueError(f"{value[:60]!r}: ds4-server binds only an IPv4 literal or 'localhost'")
    return value


def check_ipv4_literal(value: str) -> str:
    """front.host, front.metrics.host: HAProxy reads `010.0.0.1` as 8.0.0.1, so the rule is server.host's (one
    canonical IPv4 literal), without 'localhost'."""
    if canonical_ip(value) is None or ":" in value:
        raise ValueError(f"{value[:60]!r}: an IPv4 literal (0.0.0.0 for every interface)")
    return value


def check_peer_host(value: str) -> str:
    """A distributed peer's host: a name, or an IP address written canonically (never a disguised number)."""
    if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,253}", value):
        raise ValueError(f"{value[:60]!r}: a host name or an IP address")
    canonical_ip(value)
    return value


def not_an_option(value: str, what: str) -> str:
    if value.startswith("-"):
        raise ValueError(f"{value[:60]!r} begins with '-': git would read this {what} as an option")
    return value


def check_repo(value: str) -> str:
    """A git URL of an allowed transport or a local path; never something git reads as an option."""
    printable(value)
    if not value.strip():
        raise ValueError(f"empty; give {REPO_FORMS}")
    not_an_option(value, "repository")
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", value)
    if scheme:
        name = scheme.group(1).lower()
        if name not in GIT_URL_SCHEMES:
            hint = " (use https://)" if name in ("http", "git") else ""
            raise ValueError(f"{name}:// is not an allowed git transport{hint}; give {REPO_FORMS}")
        if any(ch.isspace() for ch in value):
            raise ValueError("a git URL cannot contain whitespace")
        authority = value[scheme.end():].split("/", 1)[0]
        user, _, host = authority.rpartition("@")
        host = re.sub(r":\d*$", "", host) if not host.startswith("[") else host.split("]:", 1)[0].rstrip("]") + "]"
        if name != "file" and (not host or not HOSTNAME.match(host)):
            raise ValueError(f"{host!r} is not a host name")
        if user and (user.startswith("-") or (name == "ssh" and not USERNAME.match(user))):
            raise ValueError(f"{user!r} is not a user name (ssh would read a leading '-' as an option)")
        return value
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*::", value):
        raise ValueError(f"git transport helpers ({value.split('::')[0]}::) are not allowed; give {REPO_FORMS}")
    scp = SCP_LIKE.match(value)
    if scp:  # git reads host:path (a ':' before any '/') as ssh
        user, host = scp.group("user"), scp.group("host")
        if not HOSTNAME.match(host) or (user is not None and not USERNAME.match(user)):
            raise ValueError(f"{value[:60]!r} is neither a valid user@host:path nor a local path "
                             "(write ./ before a local path with ':')")
        if any(ch.isspace() for ch in value):
            raise ValueError("an ssh repository address cannot contain whitespace")
    return value


def is_remote(repo: str) -> bool:
    """A URL or user@host:path, as git reads it; anything else is a local path (relative to the spec file)."""
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", repo) or SCP_LIKE.match(repo))


def check_ref(value: str) -> str:
    """A tag, branch or commit name as git-check-ref-format would accept it (so also never an option)."""
    if not value:
        raise ValueError("empty; give a tag, branch or commit")
    if len(value) > NAME_MAX:
        raise ValueError(f"is {len(value)} characters long; a git ref is at most {NAME_MAX} here")
    not_an_option(value, "ref")
    bad = next((ch for ch in value if ch.isspace() or ch in "~^:?*[\\" or ord(ch) < 32 or ord(ch) == 127), None)
    if bad is not None:
        raise ValueError(f"{bad!r} cannot appear in a git ref")
    if ".." in value or "@{" in value or "//" in value or value.endswith((".", "/", ".lock")) or value == "@":
        raise ValueError(f"{value[:60]!r} is not a valid git ref name")
    return value


def check_host_path(value: str) -> str:
    """Short enough for the file system: a longer path or name fails later with ENAMETOOLONG."""
    encoded = value.encode("utf-8", "surrogatepass")
    if len(encoded) >= PATH_MAX:
        raise ValueError(f"is {len(encoded)} bytes long; paths are at most {PATH_MAX - 1}")
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if longest > NAME_MAX:
        raise ValueError(f"has a name of {longest} bytes; file names are at most {NAME_MAX}")
    return value


def check_root(value: str, *, expanded: bool = False) -> str:
    """paths.root, as written in the spec (`expanded` False) or as expanded on this host."""
    pattern = CONFIG_PATH if expanded else CONFIG_PATH_RAW
    if not pattern.match(value):
        bad = sorted({ch for ch in value if not pattern.match(ch)} or {value[:1]})
        shown = ", ".join(repr(ch) for ch in bad[:5])
        raise ValueError(f"{shown} cannot be written safely into supervisord's and systemd's files (whitespace "
                         f"splits supervisord's include, % and $ are expanded, quotes and ; # are read as "
                         f"syntax); use letters, digits and / . _ + @ , : = ~ -")
    check_host_path(value)
    if expanded and len((value.rstrip("/") + SOCKET_SUFFIX).encode()) > MAX_SOCKET_PATH:
        raise ValueError(f"is too long: supervisord's socket {value.rstrip('/')}{SOCKET_SUFFIX} must fit in "
                         f"{MAX_SOCKET_PATH} bytes (a unix socket path limit)")
    return value


def check_extra_args(args: list[str]) -> list[str]:
    for index, arg in enumerate(args):
        flag = arg.split("=", 1)[0]
        if flag in MANAGED_FLAGS:
            raise FieldProblem((index,), f"{flag} is set by ds4-converge from {MANAGED_FLAGS[flag]}: set that "
                                        f"field instead (a second {flag} would override it unchecked)")
    return args


# a variable whose name says it is a secret reaches the engine through supervisord's environment= only
# (service/secrets.py), whose parser cannot pass every value: refused here, at validation, before anything runs
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH", re.IGNORECASE)
_INI_COMMENT = re.compile(r"(?<=\s)(?=[;#])")  # configparser's inline comment: ' ;' or ' #'


def secret_value_problem(value: str) -> str | None:
    """Why supervisord's `environment=` cannot pass this secret (its parser: a non-POSIX shlex that knows no
    escapes and strips quote characters at the ends, then configparser's interpolation and inline comments)."""
    if any(ch in value for ch in "\n\r\x00") or value != value.strip() or value[:1] in "'\"" and value \
            or value[-1:] in "'\"" and value:
        return ("a secret in server.env cannot hold a newline, edge whitespace or edge quotes (supervisord's "
                "environment= could not pass it)")
    if _INI_COMMENT.search(value) or "%(" in value:
        return "a secret in server.env cannot hold ' ;', ' #' or '%(' (supervisord's INI parser)"
    if '"' in value and "'" in value:
        return "a secret in server.env cannot hold both kinds of quotes (supervisord's environment=)"
    return None


def check_env(env: dict[str, str]) -> dict[str, str]:
    for key, value in env.items():
        if key in MANAGED_ENV:
            raise FieldProblem((key,), f"{key} is set by ds4-converge: {MANAGED_ENV[key]}")
        problem = SECRET_NAME.search(key) and secret_value_problem(value)
        if problem:
            raise FieldProblem((key,), problem)
    return env
