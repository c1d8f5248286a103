"""The host's own IP addresses: what `server.host` may name (a bind to any other address fails in the engine)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ds4_converge.facts.base import Fact, FactParseError


def parse_ip_addr_json(stdout: str) -> list[str]:
    """``ip -j addr`` -> every address of every interface, as ipaddress writes it (``127.0.0.1``, ``::1``)."""
    import ipaddress

    try:
        links = json.loads(stdout)
    except ValueError as exc:
        raise FactParseError(f"not the JSON of ip -j addr: {exc}") from None
    if not isinstance(links, list):
        raise FactParseError("ip -j addr: not a list of interfaces")
    found: list[str] = []
    for link in links:
        for info in (link.get("addr_info") or []) if isinstance(link, dict) else []:
            local = info.get("local") if isinstance(info, dict) else None
            if not isinstance(local, str):
                continue
            try:
                found.append(str(ipaddress.ip_address(local.split("%")[0])))
            except ValueError:
                raise FactParseError(f"ip -j addr: {local!r} is not an address") from None
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class HostAddresses(Fact["list[str] | None"]):
    """``ip -j addr``; ``None`` when ``ip`` is missing or fails (the addresses are then unknown, not none)."""

    def command(self) -> list[str]:
        return ["ip", "-j", "addr"]

    def parse(self, stdout: str) -> list[str]:
        return parse_ip_addr_json(stdout)
