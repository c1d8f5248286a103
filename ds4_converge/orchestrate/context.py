"""A run's Context, made on this host: the spec's root and state, and the roles' handles the context carries."""
from __future__ import annotations

from ds4_converge.core.context import Context, root_layout
from ds4_converge.core.state import State, StateUnreadable
from ds4_converge.engine.pins import PinCache
from ds4_converge.models.digests import DigestCache
from ds4_converge.service.render import RenderCache
from ds4_converge.service.supervisor import Supervisor
from ds4_converge.spec.loader import LoadedSpec


def make_context(loaded: LoadedSpec, **kwargs) -> Context:
    """Raises SpecInvalid (FILE:LINE:COL) when the spec does not fit this host (see core.context.root_layout)."""
    layout = root_layout(loaded)
    try:
        state = State.load(layout.state_file)
    except StateUnreadable as exc:
        from ds4_converge.orchestrate.recovery import rebuilt_state  # only for a damaged state.json

        state = rebuilt_state(layout, loaded.spec.server.name, str(exc))
    # planning may learn digests; they are written only by Context.remember_learned, after the plans, outside --check
    return Context(loaded=loaded, layout=layout, state=state, supervisor=Supervisor(layout),
                   digests=DigestCache(layout.cache / "digests.json", deferred=True),
                   pins=PinCache(layout.cache / "pins.json"), renders=RenderCache(layout.cache / "rendered.json"),
                   **kwargs)
