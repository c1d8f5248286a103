"""The spec: what a box should serve. Pydantic models; unknown keys are errors.

Field names are part of the contract (docs/spec.md, generated from this schema). Paths stay raw strings here: `~`, `$HOME`
and `${VAR}` are expanded later, on the target host, for the service user (see `paths.expand`).
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.spec import values
from ds4_converge.spec.sources import LocalSource, parse_source
from ds4_converge.spec.values import FieldProblem

TARGETS = tuple(load_knowledge()["make_targets"])  # the engine Makefile's targets
PRINTABLE = r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]*$"


def _number(value):
    """Numbers mean what they look like: `true` is not 1."""
    if isinstance(value, bool):
        raise ValueError("a number is expected, not true/false")
    return value


def _integer(value):
    """An integer field takes an integer: `!!float 18000` or `18000.0` is not one (nor is `true`)."""
    if isinstance(value, float):
        raise ValueError(f"an integer is expected, not {value!r}")
    return _number(value)


# Any string that ends up in an INI file, an environment or a command line: no control characters, bounded.
SafeStr = Annotated[str, Field(max_length=values.PATH_MAX, json_schema_extra={"pattern": PRINTABLE}),
                    AfterValidator(values.printable)]
# A path on the host: also short enough for the file system
PathStr = Annotated[SafeStr, AfterValidator(values.not_empty), AfterValidator(values.check_host_path)]
Int = Annotated[int, BeforeValidator(_integer)]
Seconds = Annotated[float, BeforeValidator(_number), Field(allow_inf_nan=False)]
DAY = 86400
# Floors of the intervals: a check every millisecond costs a core (the watchdog's, and the engine's answering it)
PROBE_FLOOR_S = 0.1
WATCHDOG_FLOOR_S = 0.25
COMPLETION_FLOOR_S = 1
# Bounds of the files a spec names that the tool reads itself (preflight refuses a larger one, naming the field)
WARMUP_BYTES_PER_TOKEN = 32  # a token is ~4 bytes of text; a JSON body's escapes and tools add some
MAX_KEYS_BYTES = 4 << 20  # some 50,000 keys of 64 characters; HAProxy loads the whole file into memory
MAX_PEM_BYTES = 1 << 20  # a certificate chain is a few KiB


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class Engine(Strict):
    """Where the engine comes from and how it is built: exactly one of `ref` and `installer`; `repo` unless the
    installer names it."""

    repo: Annotated[SafeStr, AfterValidator(values.check_repo)] | None = Field(
        None, description=f"git repository of the engine: {values.REPO_FORMS}")
    ref: Annotated[SafeStr, Field(max_length=255), AfterValidator(values.check_ref)] | None = Field(
        None, description="tag, branch or commit to build")
    installer: Annotated[SafeStr, AfterValidator(values.not_empty)] | None = Field(
        None, description="path or URL of an install.sh; the version is its DS4_REF default (and repo its DS4_REPO)")
    commit: str | None = Field(None, pattern=r"^[0-9a-f]{40}$",
                               description="expected commit the version resolves to; a mismatch is an error")
    target: Literal[TARGETS] = Field("cuda-spark", description="the engine Makefile's target; cuda needs cuda_arch")
    cuda_arch: str | None = Field(None, pattern=r"^(sm_\d{2,3}a?|native)$", description="CUDA_ARCH for target cuda")
    jobs: Int | None = Field(None, ge=1, le=1024, description="make -j (default: number of CPUs)")
    keep_releases: Int = Field(3, ge=1, le=100,
                               description="built releases to keep besides the current and last-good one")
    prepare: list[SafeStr] | None = Field(
        None, description="command (argv) run in the spec's directory before the repo is fetched, "
                          "e.g. to refresh a local mirror on an offline box")
    prepare_timeout_s: Int = Field(600, ge=1, le=DAY, description="engine.prepare is ended (its whole process "
                                   "group killed) and the run fails when it runs longer than this")

    @model_validator(mode="after")
    def _version_source(self) -> Engine:
        if (self.ref is None) == (self.installer is None):
            raise FieldProblem("ref", "give exactly one of engine.ref or engine.installer")
        if self.repo is None and self.installer is None:
            raise FieldProblem("repo", "engine.repo is required unless engine.installer names it (DS4_REPO)")
        if self.target == "cuda" and not self.cuda_arch:
            raise FieldProblem("target", "target cuda needs cuda_arch (for example sm_90 on H100/H200)")
        if self.target != "cuda" and self.cuda_arch and self.cuda_arch != "native":
            raise FieldProblem("cuda_arch", f"cuda_arch is only used with target cuda (target is {self.target})")
        return self


class Toolchain(Strict):
    """Which CUDA toolkit builds the engine. The engine's Makefile ignores PATH, so this is passed explicitly."""

    cuda_home: PathStr | None = Field(None, description="toolkit directory, e.g. /usr/local/cuda-13.2")
    min_version: str | None = Field(None, pattern=r"^\d+\.\d+$", description="lowest acceptable nvcc version")
    install_compat: bool = Field(False, description="apt-get install cuda-compat-X-Y when the driver is older")
    search: list[PathStr] = Field(["/usr/local/cuda*"], max_length=64,
                                  description="globs of toolkit directories to consider")
    cuda_link: PathStr = Field("/usr/local/cuda", description="the link the engine's Makefile defaults CUDA_HOME to")


HF_OR_URL_OR_PATH = "hf://ORG/REPO/FILE[@REVISION], https://… or a local path"


class ModelFile(Strict):
    """One model file: a plain path (used where it is), or a source to fetch with its expected identity."""

    source: SafeStr = Field(description=HF_OR_URL_OR_PATH)
    dest: PathStr | None = Field(None, description="where the file goes: a directory (default ROOT/models; the file keeps "
                                                   "its source's name), or the file's own path when it ends in .gguf")
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description="expected sha256 (checked while downloading)")
    size: Int | None = Field(None, ge=1, le=2**50, description="bytes (at most 1 PiB)")

    @model_validator(mode="before")
    @classmethod
    def _plain_path(cls, value):
        return {"source": value} if isinstance(value, str) else value

    @field_validator("source")
    @classmethod
    def _exact_name(cls, value: str) -> str:
        source = parse_source(value)  # raises ValueError on a glob ('ls *.gguf | head -1' picked the MTP draft)
        values.check_host_path(value if isinstance(source, LocalSource) else source.name)  # a path on this host
        return value


class Model(Strict):
    """The exact model files, no globs: each a path, or a model file entry."""

    main: ModelFile = Field(description="the model (-m); an MTP or DSpark file is refused here")
    mtp: ModelFile | None = Field(None, description="the MTP support file (--mtp)")
    dspark: ModelFile | None = Field(None, description="the DSpark support file (upstream b030961: --mtp FILE --dspark; the fork: --dspark FILE)")
    remove_unused: bool = Field(False, description="delete model files no release uses any more")
    memory_budget: Literal["enforce", "warn"] = Field(
        "enforce", description="a model set that does not fit in memory: enforce refuses it before anything changes; "
                               "warn reports it loudly and goes on (an engine that streams weights, e.g. with "
                               "--ssd-streaming, or a test with a sparse model)")


class Speculative(Strict):
    """Speculative decoding: off (--no-spec where the build has it), MTP (needs model.mtp) or DSpark (model.dspark)."""

    mode: Literal["off", "mtp", "dspark"] = Field("off", description="off, mtp or dspark")
    draft: Int = Field(1, ge=1, le=16, description="--mtp-draft (depth >= 2 is known to corrupt output upstream)")
    margin: Seconds | None = Field(None, gt=0, le=1000, description="--mtp-margin")

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value):
        # YAML 1.1 reads a bare `off` as false; a user who wrote `mode: off` means "off".
        return "off" if value is False else value


MAX_CTX = 2**24  # 16M tokens: 16x the model's 1M context, far above what fits in memory


class Server(Strict):
    """How ds4-server runs under supervisord: its flags, environment and user, and how it is stopped."""

    name: str = Field("ds4", pattern=r"^[a-z][a-z0-9_-]{0,30}$", description="supervisor program name")
    host: SafeStr = Field("127.0.0.1", description="IPv4 literal or localhost (the engine accepts nothing else)")
    port: Int = Field(8000, ge=1, le=65535, description="--port; a port held by anyone else is refused before a stop")
    ctx: Int = Field(32768, ge=1, le=MAX_CTX, description="-c: context tokens allocated at start")
    tokens: Int | None = Field(None, ge=1, le=MAX_CTX, description="-n: default max output tokens")
    power: Int | None = Field(None, ge=1, le=100, description="--power GPU duty cycle (upstream b030961 and the fork; below 100 costs speed; "
                                                             "100 on a build without --power is not passed)")
    warm_weights: bool = Field(False, description="--warm-weights: touch the mapped weights at start")
    kv_disk_dir: PathStr | None = Field(None, description="--kv-disk-dir: where KV checkpoints are written")
    kv_disk_space_mb: Int | None = Field(None, ge=1, le=2**30, description="--kv-disk-space-mb (needs kv_disk_dir)")
    speculative: Speculative = Speculative()
    threads: Int | None = Field(None, ge=1, le=4096, description="-t: CPU threads")
    extra_args: Annotated[list[SafeStr], AfterValidator(values.check_extra_args)] = Field(
        default_factory=list, max_length=256,
        description="more ds4-server flags, appended last; flags a spec field sets are refused")
    env: Annotated[dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=255)], SafeStr],
                   AfterValidator(values.check_env)] = Field(
        default_factory=dict, max_length=256, description="the engine's environment (numbers become strings; not "
                                                          "DS4_LOCK_FILE, which the tool sets per instance)")
    user: Annotated[str, AfterValidator(values.check_user_name),
                    Field(json_schema_extra={"pattern": values.USER_NAME.pattern})] | None = Field(
        None, description="run the engine as this user (supervisord must run as root)")
    expose: bool = Field(False, description="acknowledge that a non-loopback host serves an API without auth")
    stop_wait_s: Int = Field(600, ge=10, le=DAY, description="SIGTERM grace before SIGKILL: a loading engine finishes "
                                                    "its load first, a serving one its prefill and KV write; it also "
                                                    "bounds (up to 60 s) the wait for its memory to come back")
    drain_s: Seconds = Field(300, ge=0, le=DAY, description="before stopping the engine (restart, upgrade, revert), wait up to "
                                                  "this long for requests in flight to finish; 0 = don't wait")

    @field_validator("env", mode="before")
    @classmethod
    def _numbers_are_strings(cls, value):
        # `DS4_THREADS: 8` means "8": the environment holds strings; yes/no/true stay errors (quote what you mean)
        if isinstance(value, dict):
            return {k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
                    for k, v in value.items()}
        return value

    @field_validator("host")
    @classmethod
    def _ipv4_or_localhost(cls, value: str) -> str:
        return values.check_bind_host(value)

    @model_validator(mode="after")
    def _kv_budget_needs_dir(self) -> Server:
        if self.kv_disk_space_mb is not None and self.kv_disk_dir is None:
            raise FieldProblem("kv_disk_space_mb", "kv_disk_space_mb needs kv_disk_dir")
        return self


class Smoke(Strict):
    """A non-streamed chat completion with thinking off whose answer must contain `expect`."""

    prompt: SafeStr = Field(description="the question")
    expect: Annotated[SafeStr, AfterValidator(values.not_empty)] = Field(description="text the answer must contain")
    max_tokens: Int = Field(64, ge=1, le=MAX_CTX, description="the answer's token budget")


class Watchdog(Strict):
    """Between runs: an engine that stops answering, or exits when nobody asked, is restarted (service/watchdog.py)."""

    enabled: bool = Field(True, description="run the watchdog under supervisord (off: supervisord restarts any exit "
                                            "itself, exit 0 included, and a hung engine waits for the next run)")
    interval_s: Seconds = Field(10, ge=WATCHDOG_FLOOR_S, le=3600, description=f"how often it asks /v1/models (at "
                                f"least {WATCHDOG_FLOOR_S} s: each check costs the watchdog and the engine CPU)")
    completion_every_s: Seconds = Field(
        300, ge=0, le=DAY, description=f"how often it also asks for a one-token completion (0: never; else at least "
                                       f"{COMPLETION_FLOOR_S} s)",
        json_schema_extra={"not": {"exclusiveMinimum": 0, "exclusiveMaximum": COMPLETION_FLOOR_S}})
    failures: Int = Field(3, ge=1, le=1000, description="failed checks in a row before it restarts the engine (an "
                                                       "exit nobody ordered restarts it at once)")
    backoff_max_s: Seconds = Field(600, ge=1, le=DAY, description="restarts back off, interval_s x 2^n up to this, "
                                                                  "until the engine passes a check again")

    @field_validator("completion_every_s")
    @classmethod
    def _completion_floor(cls, value: float) -> float:
        if 0 < value < COMPLETION_FLOOR_S:
            raise ValueError(f"0 (never) or at least {COMPLETION_FLOOR_S} s: a completion every {value} s keeps "
                             f"the engine busy answering the watchdog")
        return value


class Health(Strict):
    """The probe a new engine must pass before it counts as last good; a failure reverts."""

    deadline_s: Seconds = Field(900, gt=0, le=DAY, description="time for a new engine to load and answer")
    soak_s: Seconds = Field(30, ge=0, le=DAY, description="how long it must stay healthy before it counts as good")
    interval_s: Seconds = Field(2, ge=PROBE_FLOOR_S, le=3600, description=f"pause between probes (at least "
                                                                           f"{PROBE_FLOOR_S} s)")
    smoke: Smoke | None = Field(Smoke(prompt="What is the capital of France? Answer in one word.", expect="Paris"),
                                description="the smoke completion (null: none)")
    min_decode_tps: Seconds | None = Field(
        None, gt=0, le=1_000_000, description="performance gate: a new engine whose decode tok/s (short bench after the soak) is "
                                "below this is reverted like an unhealthy one")
    max_regression: Seconds | None = Field(
        None, gt=0, lt=1, description="performance gate: a new engine slower than last good's recorded decode tok/s "
                                      "by more than this fraction (0.1 = 10 %) is reverted")
    tool_call: bool = Field(False, description="the probe also asks with a tools definition: the answer must be a "
                                               "structured tool_calls entry naming the function with JSON arguments, "
                                               "not DSML as text (else reverted)")
    watchdog: Watchdog = Watchdog()
    warmup: list[PathStr] = Field(
        default_factory=list, max_length=64, description="prompt files replayed once a new engine is healthy, so the first request "
                                          "finds their prefix in the KV cache (text: a system prompt; .json: a "
                                          "request body with messages); each a regular file of at most "
                                          f"{WARMUP_BYTES_PER_TOKEN} bytes per token of server.ctx")


class Paths(Strict):
    """Where the tool keeps what it owns on the host."""

    root: Annotated[SafeStr, Field(max_length=1024), AfterValidator(values.check_root)] = Field(
        "/var/lib/ds4-converge", description="state, releases, logs and supervisor files; letters, digits and "
                                             "/ . _ + @ , : = ~ - only (it is written unquoted into config files)")


class Address(Strict):
    """A TCP address of the distributed protocol (not the HTTP API)."""

    host: SafeStr = Field(description="host name or IP address")
    port: Int = Field(ge=1, le=65535)

    @field_validator("host")
    @classmethod
    def _host_name(cls, value: str) -> str:
        return values.check_peer_host(value)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class Distributed(Strict):
    """This box's part in a distributed deployment (ds4 b030961 `--role/--layers/--listen/--coordinator`).

    The layer ranges of all boxes together must cover every layer once, and end in the output head:
    `ds4-converge deployment-check SPEC...` checks that across the specs of one deployment."""

    role: Literal["coordinator", "worker"] = Field(description="--role: the coordinator serves the HTTP API and "
                                                               "drives the workers; a worker serves a layer range")
    layers: SafeStr = Field(description="--layers A:B, inclusive (e.g. 0:21), or A:output (through the last "
                                        "layer, with the output head)")
    listen: Address = Field(description="--listen: the coordinator's address for its workers, or a worker's data "
                                        "listener (the tool checks that a worker listens there)")
    coordinator: Address | None = Field(None, description="--coordinator: where a worker reaches its coordinator")
    stop_grace_s: Int = Field(5, ge=1, le=600, description="a worker ignores the first SIGTERM: stopping it "
                                  "sends a second one, and SIGKILL after this many seconds")

    @field_validator("layers", mode="before")
    @classmethod
    def _quoted(cls, value):
        if isinstance(value, int) and not isinstance(value, bool):
            raise ValueError("quote the range: '0:21' (a YAML 1.1 reader takes 0:21 for a number)")
        return value

    @field_validator("layers")
    @classmethod
    def _range(cls, value: str) -> str:
        from ds4_converge.spec.layers import parse_layers

        parse_layers(value)  # raises ValueError with the engine's own wording
        return value

    @model_validator(mode="after")
    def _role_needs(self) -> Distributed:
        from ds4_converge.spec.layers import parse_layers

        if self.role == "coordinator":
            if self.coordinator is not None:
                raise FieldProblem("coordinator", "a coordinator takes no coordinator address (it listens on listen)")
            if parse_layers(self.layers).start != 0:
                raise FieldProblem("layers", "the coordinator's layer range must start at layer 0")
        elif self.coordinator is None:
            raise FieldProblem("coordinator", "a worker needs the coordinator's address (coordinator: {host, port})")
        return self

    @property
    def worker(self) -> bool:
        return self.role == "worker"


class Listen(Strict):
    """An address to listen on: an IPv4 literal (0.0.0.0: every interface) and a port."""

    host: SafeStr = Field("127.0.0.1", description="IPv4 literal (0.0.0.0: every interface)")
    port: Int = Field(ge=1, le=65535)

    _ipv4 = field_validator("host")(classmethod(lambda cls, value: values.check_ipv4_literal(value)))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class Tls(Strict):
    """The front door's certificate and private key (PEM files; read by HAProxy where they are, never copied)."""

    cert: PathStr = Field(description=f"PEM certificate (chain), at most {MAX_PEM_BYTES >> 20} MiB")
    key: PathStr = Field(description=f"PEM private key of the certificate, at most {MAX_PEM_BYTES >> 20} MiB")


class Front(Strict):
    """A front door: HAProxy under the same supervisord, in front of the engine. Clients reach `host:port` with
    `Authorization: Bearer KEY`; the engine listens on loopback only (server.port or server.port + 1, the two
    slots), and a new engine is reached by clients only after the probe passed. Requests that arrive while no
    good engine listens (a switch, a restart, a revert) are held up to hold_s, then served."""

    host: SafeStr = Field("0.0.0.0", description="the public address (IPv4 literal; 0.0.0.0: every interface)")
    port: Int = Field(8000, ge=1, le=65535, description="the public port clients use")
    keys: PathStr = Field(description="the API-key file: one key per line ('#' comments), mode 0600, at most "
                                      f"{MAX_KEYS_BYTES >> 20} MiB; read by HAProxy where it is, never copied")
    tls: Tls | None = Field(None, description="serve HTTPS with this certificate and key (default: plain HTTP)")
    hold_s: Int = Field(120, ge=1, le=3600, description="how long a request may be held while no good engine "
                                                        "listens (a switch, a restart); then 503")
    metrics: Listen | None = Field(Listen(host="127.0.0.1", port=8405),
                                   description="where HAProxy's Prometheus exporter answers /metrics (null: none)")
    overlap: Literal["auto", "off"] = Field(
        "auto", description="auto: when memory holds both (the memory budget says), a new engine loads beside the "
                            "serving one and clients move once it passed the probe, so none is held; off: the "
                            "serving engine stops first and requests are held meanwhile")
    flip: Literal["after-smoke", "after-soak"] = Field(
        "after-smoke", description="when the serving engine stops first (overlap off, or no memory for two): "
                                   "after-smoke: held requests go to the new engine once it answered the smoke "
                                   "(and the tool call, the gate), the soak goes on while it serves, and a crash "
                                   "then reverts it; after-soak: they are held through the soak too")

    _ipv4 = field_validator("host")(classmethod(lambda cls, value: values.check_ipv4_literal(value)))


class Spec(Strict):
    engine: Engine
    toolchain: Toolchain = Toolchain()
    model: Model
    server: Server = Server()
    health: Health = Health()
    paths: Paths = Paths()
    distributed: Distributed | None = Field(None, description="this box's part in a distributed deployment "
                                                              "(ds4 b030961 and later)")
    front: Front | None = Field(None, description="a front door (HAProxy) with API keys, optional TLS and "
                                                  "metrics, that holds requests during a switch")

    @model_validator(mode="after")
    def _front_ports(self) -> Spec:
        front = self.front
        if front is None:
            return self
        if self.distributed is not None and self.distributed.worker:
            raise FieldProblem("front", "a distributed worker serves no HTTP API: only its coordinator takes a front")
        if self.server.host not in ("127.0.0.1", "localhost"):
            raise FieldProblem("server.host", f"with front, the engine listens on loopback only (127.0.0.1): "
                                              f"clients reach it through front.host ({front.host})")
        if self.server.port == 65535:
            raise FieldProblem("server.port", "with front, the engine's two slots are server.port and "
                                              "server.port + 1: 65535 leaves no room for the second")
        slots = {self.server.port: "server.port (the engine's first slot)",
                 self.server.port + 1: "server.port + 1 (the engine's second slot)"}
        if self.distributed is not None:
            slots[self.distributed.listen.port] = "distributed.listen.port"
        taken = dict(slots)
        for field, port in (("front.port", front.port),
                            ("front.metrics.port", front.metrics.port if front.metrics else None)):
            if port is None:
                continue
            if port in taken:
                raise FieldProblem(field, f"port {port} is also {taken[port]}: each listener needs its own port "
                                          f"(with front, the engine listens on 127.0.0.1 at server.port and "
                                          f"server.port + 1; give server.port another value)")
            taken[port] = field
        return self

    @model_validator(mode="after")
    def _distributed_ports(self) -> Spec:
        d = self.distributed
        if d is not None and d.listen.port == self.server.port:
            raise FieldProblem("distributed.listen.port",
                               f"port {d.listen.port} is server.port (the HTTP API): the distributed protocol needs "
                               f"its own port")
        return self

    @model_validator(mode="after")
    def _speculation_has_files(self) -> Spec:
        mode = self.server.speculative.mode
        if mode == "mtp" and self.model.mtp is None:
            raise FieldProblem("server.speculative.mode", "speculative mode mtp needs model.mtp")
        if mode == "dspark" and self.model.dspark is None:
            raise FieldProblem("server.speculative.mode", "speculative mode dspark needs model.dspark")
        if mode != "off" and self.distributed is not None:
            # b030961 ds4.c opens the support model only when distributed.role is NONE: --mtp is dropped silently
            raise FieldProblem("server.speculative.mode",
                               f"speculative mode {mode} does nothing in a distributed deployment: the engine loads "
                               f"no MTP or DSpark support model when it runs with --role (it drops --mtp without "
                               f"a word, antirez/ds4#877); set server.speculative.mode: off")
        return self
