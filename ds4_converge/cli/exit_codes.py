"""The exit codes of every command, in one place (docs/cli.md, "Exit codes"; each command's help lists its own)."""

OK = 0  # converged, planned, healthy, done
FAILED = 1  # failed (a reverted run and an internal error included); `status`: converged before, not healthy now
INVALID = 2  # invalid spec or usage
LOCKED = 3  # another run holds the lock of this root
NEVER_CONVERGED = 4  # `status`, `logs`, `rollback`: nothing was ever converged under this root
# 130 / 143: interrupted by SIGINT / SIGTERM (128 + the signal number, as shells do): core.interrupts.exit_code

MEANINGS = {OK: "ok", FAILED: "failed", INVALID: "invalid spec or usage", LOCKED: "locked",
            NEVER_CONVERGED: "never converged here", 130: "interrupted (SIGINT)", 143: "interrupted (SIGTERM)"}
