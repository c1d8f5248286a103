"""Commands about speed: bench (measure the running engine) and tune (try the settings, rank them)."""
from __future__ import annotations


from ds4_converge.cli.command import FAILED, INVALID, OK, CliError, Command
from ds4_converge.cli.values import number, number_list

BENCH_EXITS = """exit codes:
    0  measured
    1  failed: nothing serves under this root, or the engine did not answer the bench
    2  invalid spec or usage (or --plot without the plot extra)"""
TUNE_EXITS = """exit codes:
    0  every setting tried (or skipped with its reason) and the box ends healthy on the chosen one
    1  failed: the box could not end healthy on the setting it should end on
    2  invalid spec or usage
    3  another run holds the lock of this root"""


_int_list = number_list(int, 1, 100)  # server.power values, bounded as the spec bounds them
_sizes = number_list(int, 1, 1 << 24, words=("ctx",))


def _common_arguments(parser) -> None:
    parser.add_argument("--reps", type=number(int, 1, 1000), default=3, help="rounds per case (median and spread over them)")
    parser.add_argument("--gen-tokens", type=number(int, 1, 1 << 24), default=128, help="tokens per answer")


def _bench_arguments(parser) -> None:
    _common_arguments(parser)
    parser.add_argument("--prompt-tokens", type=_sizes, default=(512, 5500, "ctx"), metavar="N,N,ctx",
                        help="prompt lengths; 'ctx': one near the context size (default 512,5500,ctx)")
    parser.add_argument("--concurrency", type=number(int, 1, 256), default=4, metavar="N",
                        help="also run the shortest prompt with N clients at once (1: not)")
    parser.add_argument("--plot", metavar="FILE", help="draw the results (.png or .svg; needs the plot extra)")


def _tune_arguments(parser) -> None:
    _common_arguments(parser)
    parser.add_argument("--write", action="store_true", help="write the fastest setting into the spec file "
                                                             "(comments kept) and end the box on it")
    parser.add_argument("--power", type=_int_list, default=(), metavar="P,P",
                        help="also try these server.power values (default: power as the spec says)")


def bench(args, session) -> int:
    from pathlib import Path

    from ds4_converge.cli import perf_report, report
    from ds4_converge.health.bench import BenchError, BenchOptions, bench as measure, history, latest_per_key
    from ds4_converge.health.probe import NotReady, Unhealthy
    from ds4_converge.service.watch import endpoint

    ctx = session.context()
    if not ctx.layout.root.exists():
        raise CliError(FAILED, "never_converged", f"{ctx.layout.root} does not exist: this spec was never "
                                                  "converged here, nothing serves to bench")
    options = BenchOptions(prompt_tokens=args.prompt_tokens, concurrency=args.concurrency, reps=args.reps,
                           gen_tokens=args.gen_tokens)
    try:
        record = measure(ctx, options, ctx.state.current, endpoint(ctx), say=(lambda _m: None) if session.json else session.err_line)
    except (BenchError, NotReady, Unhealthy) as exc:
        raise CliError(FAILED, "failed", f"bench: {endpoint(ctx)}: {exc}") from None
    if args.plot:
        try:
            perf_report.plot(latest_per_key(history(ctx.layout.bench_results)), Path(args.plot))
        except perf_report.PlotUnavailable as exc:
            raise CliError(INVALID, "usage", str(exc)) from None
    if session.json:
        session.emit(report.document("bench", ok=True, exit_code=OK, release=record["release"],
                                     endpoint=record["endpoint"], bench=record))
    else:
        perf_report.bench_table(record, session.out)
    return OK


def tune(args, session) -> int:
    import dataclasses

    from ds4_converge.cli import perf_report, report
    from ds4_converge.orchestrate.tune import TUNE_BENCH, tune as run

    loaded = session.load_spec()
    session.context()  # the root and the service user are placed before anything is tried
    options = dataclasses.replace(TUNE_BENCH, reps=args.reps, gen_tokens=args.gen_tokens)
    with session.lock().acquire():
        result = run(loaded, args.overrides, powers=args.power, write=args.write, options=options,
                     say=(lambda _m: None) if session.json else session.err_line).to_json()
    code = OK if result["ok"] else FAILED
    if session.json:
        session.emit(report.document("tune", ok=result["ok"], exit_code=code, error=result["error"],
                                     **session.serving_fields(), tune=result))
    else:
        perf_report.tune_table(result, session.out)
    return code


COMMANDS = [
    Command("bench", "how fast the running engine is: time to first token, prefill and decode tok/s", bench,
            add_arguments=_bench_arguments, epilog=BENCH_EXITS),
    Command("tune", "try speculation off, MTP draft 1-3 and DSpark (and --power values), rank them", tune,
            add_arguments=_tune_arguments, epilog=TUNE_EXITS),
]
