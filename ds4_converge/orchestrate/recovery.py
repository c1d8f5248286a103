"""What the box really runs, read from disk, when the record of it is lost (a torn or corrupt state.json)."""
from __future__ import annotations

from ds4_converge.core.layout import Layout
from ds4_converge.core.state import Deployment, State
from ds4_converge.service.render import read_program_conf
from ds4_converge.service.supervisor import Supervisor, SupervisorError


def rebuilt_state(layout: Layout, name: str, damaged: str) -> State:
    """`current` is the program file supervisord reads. When supervisord runs it, it is also taken as last good:
    it was serving when we found it, so a failed switch goes back to it instead of leaving nothing serving."""
    state = State(damaged=damaged)
    note = "no program file: nothing to rebuild from"
    try:
        text = layout.program_conf(name).read_text()
    except OSError:
        text = None
    release, argv, models = read_program_conf(text) if text else (None, [], [])
    if release and argv:
        deployment = Deployment(release=release, program_conf=text, command=argv, endpoint=_endpoint(argv),
                                model_files=models)
        state.current = deployment
        note = f"{release} from {layout.program_conf(name)}"
        supervisor = Supervisor(layout)
        try:
            running = supervisor.is_running() and supervisor.running_pid(name) is not None
        except (SupervisorError, OSError):
            running = False
        if running:
            state.good = [deployment]
            note += ", running, taken as last good"
        else:
            note += ", not running (no last good)"
    state.damaged = f"{damaged}; rebuilt from disk: {note}; the file is set aside on the next change"
    return state


def _endpoint(argv: list[str]) -> str:
    def value(*flags: str, default: str) -> str:
        found = default
        for flag, following in zip(argv, argv[1:]):
            if flag in flags:
                found = following
        return found

    return f"http://{value('--host', default='127.0.0.1')}:{value('--port', default='8000')}"
