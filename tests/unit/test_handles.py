"""The Protocols in core name the roles' handles as the Context carries them: each role's class has every
method its Protocol names, with the same parameters (a Protocol that drifted from its class would type a field
with calls that do not exist)."""
import inspect
from typing import Protocol

import pytest

from ds4_converge.core.learned import Digests, Pins, Renders
from ds4_converge.core.supervision import Supervision
from ds4_converge.engine.pins import PinCache
from ds4_converge.models.digests import DigestCache
from ds4_converge.service.render import RenderCache
from ds4_converge.service.supervisor import Supervisor


def _methods(protocol) -> set[str]:
    """The public methods the Protocol and the Protocols it extends name (not Protocol's own machinery)."""
    return {name for kind in protocol.__mro__ if getattr(kind, "_is_protocol", False) and kind is not Protocol
            for name, member in vars(kind).items() if inspect.isfunction(member) and not name.startswith("_")}


@pytest.mark.parametrize("protocol, cls", [(Supervision, Supervisor), (Digests, DigestCache), (Pins, PinCache),
                                           (Renders, RenderCache)])
def test_each_handle_class_has_what_its_protocol_asks(protocol, cls):
    assert _methods(protocol)
    for name in sorted(_methods(protocol)):
        asked = list(inspect.signature(getattr(protocol, name)).parameters)
        assert list(inspect.signature(getattr(cls, name)).parameters) == asked, (cls.__name__, name)
