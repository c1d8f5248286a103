"""Toolchain role: which nvcc/CUDA_HOME builds the engine, and what the service needs to run its binary.

The choice (:func:`~ds4_converge.toolchain.select.select_toolkit`) goes into ``ctx.toolkit``, which the engine role
passes to make as ``NVCC=… CUDA_HOME=…``; the forward-compat ``LD_LIBRARY_PATH`` goes into ``ctx.service_env``.
The only change this role ever makes is ``apt-get install -y cuda-compat-X-Y`` when ``toolchain.install_compat``
is on and the driver is older than the toolkit.
"""
from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from ds4_converge.core.context import Context
from ds4_converge.core.plan import Change, RoleFailed, RolePlan
from ds4_converge.core.shell import CommandFailed, run
from ds4_converge.core.toolkit import Toolkit
from ds4_converge.toolchain.select import compat_env, compat_package, needs_compat, select_toolkit

NAME = "toolchain"


def _why(ctx: Context) -> str:
    toolchain = ctx.spec.toolchain
    if toolchain.cuda_home:
        return "toolchain.cuda_home"
    where = ", ".join(toolchain.search)
    floor = f" with nvcc >= {toolchain.min_version}" if toolchain.min_version else ""
    return f"newest toolkit in {where}{floor}; PATH is never used"


def _install_argv(package: str) -> list[str]:
    return ["apt-get", "install", "-y", package]


def plan(ctx: Context) -> RolePlan:
    spec = ctx.spec
    if spec.engine.target == "cpu":
        ctx.toolkit = Toolkit()
        return RolePlan(NAME, reason="cpu build: no CUDA toolkit needed")
    host = ctx.facts
    cuda_home = str(ctx.host_path(spec.toolchain.cuda_home)) if spec.toolchain.cuda_home else None
    toolkit, findings = select_toolkit(spec, host, cuda_home=cuda_home)
    if toolkit is None:
        # preflight reports the same errors first; this only guards callers that skip it
        return RolePlan(NAME, reason="no usable CUDA toolkit", findings=[f for f in findings if f.level == "error"])
    ctx.toolkit = toolkit
    reason = (f"build with NVCC={toolkit.nvcc} CUDA_HOME={toolkit.cuda_home} (nvcc {toolkit.version}, "
              f"{_why(ctx)})")
    changes: list[Change] = []
    if needs_compat(toolkit, host):
        driver = host.driver.cuda_version
        env = compat_env(toolkit, host)
        if env:
            reason += f"; engine env LD_LIBRARY_PATH={env['LD_LIBRARY_PATH']} (driver CUDA {driver})"
        elif spec.toolchain.install_compat:
            package = compat_package(toolkit.version)
            compat = Path(toolkit.cuda_home) / "compat"
            env = {"LD_LIBRARY_PATH": os.fspath(compat)}
            why = f"driver CUDA {driver} is older than nvcc {toolkit.version}"
            changes.append(Change(" ".join(_install_argv(package)), None,
                                  f"{compat}/libcuda.so (forward compat for driver CUDA {driver}; "
                                  f"LD_LIBRARY_PATH for the engine)\n",
                                  action=partial(_install_compat, package=package, compat=compat, why=why)))
            reason = f"install {package}; " + reason
        ctx.service_env.update(env)
    return RolePlan(NAME, changes, reason=reason)


def _install_compat(ctx: Context, *, package: str, compat: Path, why: str) -> str:
    ctx.say(f"installing {package} ({why})")
    try:
        run(_install_argv(package), env={"DEBIAN_FRONTEND": "noninteractive"}, timeout=1800)
    except CommandFailed as exc:
        raise RoleFailed(f"apt-get install {package} {exc.what}; nothing else was changed", exc.tail) from None
    # what the package put there is the install's result, not a new decision: an empty compat dir would let
    # the engine load the driver's older libcuda
    if not any(p.name.startswith("libcuda.so") for p in compat.glob("libcuda.so*")):
        raise RoleFailed(f"apt-get installed {package}, but {compat} holds no libcuda.so: the engine would "
                         f"load the driver's older libcuda")
    return f"installed {package}; LD_LIBRARY_PATH={compat} for the engine"
