"""Commands of a distributed deployment: whether the specs of its boxes fit together, and whether a worker is
connected to its coordinator."""
from __future__ import annotations

from ds4_converge.cli.command import FAILED, INVALID, OK, CliError, Command

DEPLOYMENT_EXITS = """exit codes:
    0  the specs fit together: one coordinator, the layers covered once, one engine commit, one model
    1  they do not (each problem is printed)
    2  a spec is invalid, or usage"""


def _deployment_arguments(parser) -> None:
    parser.add_argument("specs", nargs="+", metavar="SPEC", help="the spec of each box of the deployment")
    parser.add_argument("--name", action="append", default=[], metavar="NAME",
                        help="what to call each box in messages, in the order of the specs (default: the file)")


def deployment_check(args, session) -> int:
    from ds4_converge.cli import report
    from ds4_converge.spec import deployment
    from ds4_converge.spec.loader import SpecInvalid, load_spec

    if args.name and len(args.name) != len(args.specs):
        raise CliError(INVALID, "usage", f"{len(args.name)} --name for {len(args.specs)} specs")
    names = args.name or list(args.specs)
    boxes, problems = [], []
    for name, path in zip(names, args.specs):
        try:
            boxes.append(deployment.Box(name, load_spec(path).spec))
        except SpecInvalid as exc:
            raise CliError(INVALID, "invalid", f"{path}: invalid spec", lines=exc.problems,
                           problems=[p.to_json() for p in exc.located]) from None
    problems = deployment.check(boxes)
    code = FAILED if problems else OK
    if session.json:
        session.emit(report.document("deployment-check", ok=not problems, exit_code=code,
                                     error="; ".join(problems) or None,
                                     deployment={"boxes": names, "problems": problems}))
    else:
        for line in problems:
            session.say(f"✗ {line}")
        if not problems:
            session.say(f"deployment of {len(boxes)} boxes fits together: " + ", ".join(
                f"{b.name} {b.spec.distributed.role} {b.spec.distributed.layers}" for b in boxes))
    return code


COMMANDS = [
    Command("deployment-check", "check that the specs of a distributed deployment's boxes fit together",
            deployment_check, add_arguments=_deployment_arguments, takes_spec=False, epilog=DEPLOYMENT_EXITS,
            description="One coordinator and its workers: the layer ranges cover every layer once and end at the "
                        "output head, the workers reach the coordinator's listen address, and every box pins the "
                        "same engine commit (engine.commit) and model file (model.main.sha256)."),
]
