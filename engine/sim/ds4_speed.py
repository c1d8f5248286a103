"""How fast the simulated engine is: prefill, decode, power, speculation, batching.

ds4-server asks this module how long to "work"; every figure follows its flags and
the environment (sim.conf keys in brackets), so that a benchmark or a tuner sees
the effects a real DGX Spark shows:

- decode: DS4_SIM_DECODE_TOK_S [decode_tok_s] tokens/s, times --power / 100 (fork);
- prefill: DS4_SIM_PREFILL_TOK_S [prefill_tok_s] uncached prompt tokens/s;
- speculation (--mtp with --mtp-draft K, or a DSpark drafter drafting
  DS4_SIM_DSPARK_DRAFT tokens): each drafted token is accepted with probability
  ACCEPT (a run of accepted tokens ends at the first miss) and each one costs
  OVERHEAD of a plain step to draft and verify, so one step yields
  (1 - ACCEPT^(K+1)) / (1 - ACCEPT) tokens for 1 + OVERHEAD*K step times.
  A low acceptance makes speculation slower than plain decoding, as on the field's
  abliterated model. DS4_SIM_MTP_ACCEPT / _OVERHEAD, DS4_SIM_DSPARK_ACCEPT / _OVERHEAD;
- batching (fork only): up to DS4_SERVER_COALESCE_MAX (32) requests decode at once,
  each at decode / (1 + DS4_SIM_BATCH_SLOWDOWN * (n - 1)), so aggregate throughput
  rises with clients (the field's 28 tok/s alone, ~59 with 12 clients); prefill stays
  one request at a time. Upstream serves one generation at a time;
- DS4_SIM_TIME_SCALE [time_scale]: every sleep is multiplied by it (tests use 0.05 to
  run a realistic profile twenty times faster; measured rates grow to match).

Stdlib only, like the rest of the simulated engine.
"""

import threading

import ds4_common as C

# field-like: upstream MTP is net-negative on GB10 (0.96x at draft 1), the fork's DSpark drafter ~1.39x,
# the fork serves 28 tok/s to one client and ~59 tok/s to 12 at once (as Spark users measured it)
DEFAULTS = {"time_scale": "1", "mtp_accept": "0.3", "mtp_overhead": "0.35", "dspark_accept": "0.58",
            "dspark_overhead": "0.15", "dspark_draft": "4", "batch_slowdown": "0.43"}


def _setting(name):
    return C.setting_float("DS4_SIM_" + name.upper(), name, DEFAULTS[name])


def time_scale():
    return _setting("time_scale")


def batch_size(fork):
    """How many generations may run at once: the fork batches, upstream serialises."""
    if not fork:
        return 1
    return max(int(C.setting_float("DS4_SERVER_COALESCE_MAX", "coalesce_max", "32")), 1)


class GenerationSlots:
    """A lock that `size` generations may hold at once (size 1: a plain lock).

    It keeps the Lock interface ds4-server uses (with, acquire(timeout), release,
    locked) and also counts who runs and who waits, for /metrics."""

    def __init__(self, size):
        self.size = size
        self._cond = threading.Condition()
        self._running = 0
        self._waiting = 0

    def acquire(self, blocking=True, timeout=-1):
        with self._cond:
            self._waiting += 1
            try:
                ok = self._cond.wait_for(lambda: self._running < self.size,
                                         None if timeout is None or timeout < 0 else timeout) if blocking \
                    else self._running < self.size
                if ok:
                    self._running += 1
                return ok
            finally:
                self._waiting -= 1

    def acquire_all(self, timeout):
        """Wait until no generation runs, then hold every slot (shutdown: nothing new starts)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._running == 0, timeout):
                return False
            self._running = self.size
            return True

    def release(self):
        with self._cond:
            self._running -= 1
            self._cond.notify()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    def locked(self):
        return self._running > 0

    def running(self):
        return self._running

    def waiting(self):
        return self._waiting


class Speed:
    """The speed of one server process, fixed at start from its options and environment."""

    def __init__(self, opts, fork, slots):
        self.slots = slots
        self.scale = time_scale()
        power = opts.get("power", 100) if fork else 100
        self.decode = C.decode_tok_s() * power / 100.0
        self.prefill = C.prefill_tok_s()
        self.batch_slowdown = _setting("batch_slowdown")
        self.prefill_lock = threading.Lock()
        self.mode, self.draft, self.accept, self.overhead = "off", 0, 0.0, 0.0
        if opts.get("mtp"):
            self.mode, self.draft = "mtp", max(int(opts.get("mtp_draft") or 1), 1)
            self.accept, self.overhead = _setting("mtp_accept"), _setting("mtp_overhead")
        elif fork and opts.get("dspark"):
            self.mode, self.draft = "dspark", max(int(_setting("dspark_draft")), 1)
            self.accept, self.overhead = _setting("dspark_accept"), _setting("dspark_overhead")
        self.accept = min(self.accept, 0.999)

    # ---- figures
    def tokens_per_step(self):
        if self.mode == "off":
            return 1.0
        a = self.accept
        return (1.0 - a ** (self.draft + 1)) / (1.0 - a)

    def step_cost(self):
        return 1.0 + self.overhead * self.draft

    def decode_tok_s(self, running=1):
        """Tokens/s of one request while `running` requests decode together."""
        single = self.decode * self.tokens_per_step() / self.step_cost()
        return single / (1.0 + self.batch_slowdown * max(running - 1, 0))

    # ---- what the server sleeps
    def prefill_seconds(self, tokens):
        return self.scale * tokens / self.prefill

    def token_seconds(self):
        return self.scale / self.decode_tok_s(max(self.slots.running(), 1))

    def prefilling(self):
        """Held while a prompt is prefilled: prefill runs one request at a time."""
        return self.prefill_lock

    # ---- what the server reports
    def timings(self):
        """Extra fields of the fork's `timings` while speculating."""
        if self.mode == "off":
            return {}
        return {"spec_accept_rate": round(self.accept, 3), "tok_per_step": round(self.tokens_per_step(), 3)}
