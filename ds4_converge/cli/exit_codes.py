"""The exit codes of every command, in one place (README, "Exit codes")."""

OK = 0  # converged (or, with --check, planned)
FAILED = 1  # failed, a reverted run included
INVALID = 2  # invalid spec or usage
LOCKED = 3  # another run holds the lock of this root
