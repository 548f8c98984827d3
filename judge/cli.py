"""The `judge` command: turn annotation guidelines into rubric files and run them as an LLM judge."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from typing import Any

from judge.errors import EXIT_FAILED, JudgeError, Stopped, exit_with

# Verbs defined in other modules, each with `register(subparsers)`. They must not import heavy libraries (pandas,
# scipy, matplotlib) at module level: every `judge` command builds the whole parser.
# calibration/ is reached only through its command hub, which registers every statistics verb.
VERB_MODULES = ("calibration.cli", "judge.annotation.cli", "judge.batch_cli")


def _command(sub, name: str, help: str, example: str) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=help,
        description=help,
        epilog="example:\n" + textwrap.indent(textwrap.dedent(example).strip(), "  "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


MODEL_GROUPS = ("model and server", "vLLM engine (--backend vllm)", "decoding", "run and cache", "batch and scale-out")


def add_model_arguments(parser: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """Flags shared by every verb that calls a model, in named groups (MODEL_GROUPS, returned by name for a verb's
    own flags to join)."""
    groups = {title: parser.add_argument_group(title) for title in MODEL_GROUPS}
    g = groups["model and server"]
    g.add_argument("--backend", choices=["local", "openai", "vllm"], default=None,
                   help="local: embedded llama.cpp server with a small bundled model (the default without --base-url); "
                        "openai: any (the default with --base-url) "
                        "OpenAI-compatible server (hosted API, vllm serve, llama.cpp server); vllm: in-process engine")
    g.add_argument("--model", help="model name on the server (openai), a .gguf file (local; default: bundled "
                                   "SmolLM2-135M), or a Hugging Face model folder or name (vllm)")
    g.add_argument("--base-url", action="append", default=None, metavar="URL",
                   help="server URL, e.g. http://127.0.0.1:8000/v1; repeat it for replicas of one model, each with "
                        "--concurrency requests in flight, the least loaded healthy one answering (default: "
                        "$JUDGE_BASE_URLS, comma-separated, else $OPENAI_BASE_URL, else the OpenAI API)")
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable holding the API key (keys are never taken from flags, nor written "
                        "anywhere)")
    g.add_argument("--client", choices=["auto", "sdk", "aiohttp"], default="auto",
                   help="HTTP client: the OpenAI SDK, or aiohttp for self-hosted servers; auto = SDK for https, "
                        "aiohttp for http")
    g.add_argument("--concurrency", type=int, default=None,
                   help="requests in flight at once, per server with several --base-url (default 16; 256 for "
                        "--backend vllm, whose batches are made of the requests in flight)")
    g.add_argument("--timeout", type=float, default=None,
                   help="seconds per request before it is retried once (default 120; 600 for the local and vllm "
                        "backends, "
                        "whose long answers on a CPU take minutes)")
    g = groups["decoding"]
    g.add_argument("--temperature", type=float, default=None, help="default 0, or 1.0 with --samples > 1")
    g.add_argument("--max-tokens", type=int, default=None,
                   help="answer length limit (default: what the answer schema can need, priced for the rubric's "
                        "language)")
    g.add_argument("--seed", type=int, default=0, help="sampling seed; sample k uses seed+k (default 0)")
    g.add_argument("--samples", type=int, default=1, help="answers per judgment; score = their mean (default 1)")
    g.add_argument("--logprobs", action="store_true",
                   help="score = expected value over the scale's points from the score token's log-probabilities")
    g.add_argument("--response-format", choices=["json_schema", "json_object", "text"], default="json_schema",
                   help="strongest structured-output mode to try first; weaker ones are used if the server refuses")
    g = groups["run and cache"]
    g.add_argument("--cache", metavar="DIR", help="answer cache directory (default: the user cache dir)")
    g.add_argument("--no-cache", action="store_true", help="neither read nor write the answer cache")
    g.add_argument("--refresh", action="store_true",
                   help="ask the model anew: read no answer from the cache (fresh ones replace the stored ones) and "
                        "redo lines of --output that came from it; for re-judging a drift anchor set")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--prices", metavar="FILE",
                   help="a price table (JSON or YAML: model -> input, cached_input, output per million tokens, "
                        "batch_discount) that turns the run's tokens into a cost in the summary; never fetched")
    e = groups["vLLM engine (--backend vllm)"]
    e.add_argument("--tensor-parallel-size", type=int, default=1, metavar="N",
                   help="GPUs to split the model over (default 1)")
    e.add_argument("--max-model-len", type=int, default=None, metavar="TOKENS",
                   help="context length (prompt + answer); a longer prompt fails its judgment (default: the model's)")
    e.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto",
                   help="weights and activations (default auto: the model's; float32 is the fastest on most CPUs)")
    e.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="FRACTION",
                   help="share of GPU memory vLLM may take (default: vLLM's, 0.9)")
    b = groups["batch and scale-out"]
    b.add_argument("--batch", action="store_true",
                   help="send the requests through the server's Batch API (/v1/files, /v1/batches: half price on "
                        "OpenAI, answers within 24 h); a manifest next to --output lets a rerun resume, never resubmit")
    b.add_argument("--batch-dir", metavar="DIR",
                   help="write the requests as OpenAI batch files into DIR and stop, saying what to run (e.g. "
                        "`vllm run-batch` on each node); rerun the same command to record the *.out.jsonl answers")
    b.add_argument("--shards", type=int, default=None, metavar="N",
                   help="with --batch-dir: split each round into N files, one per node (default 1)")
    return groups


def add_plan_arguments(groups: dict[str, argparse._ArgumentGroup]) -> None:
    """`score` and `compare`: a plan without a model, and the Ray executor (into add_model_arguments' groups)."""
    groups["run and cache"].add_argument("--dry-run", action="store_true",
                   help="print the plan without calling a model: requests, rounds, input tokens (the model's own "
                        "tokenizer where it loads), the output-token bound and, with --prices, the cost; the last "
                        "line is one JSON object; nothing is written")
    g = groups["batch and scale-out"]
    g.add_argument("--executor", choices=["online", "ray"], default="online",
                   help="ray: each round's requests as --batch-dir shards (default DIR: OUTPUT.ray-batches), run "
                        "through Ray Data against --base-url (or the vLLM engine with --backend vllm) and recorded, "
                        "round after round, until done; needs pip install \".[ray]\"")
    g.add_argument("--ray-address", metavar="ADDR",
                   help="the Ray cluster of --executor ray (default $RAY_ADDRESS, else a local one with 2 CPUs)")


def _add_output_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    g = parser.add_argument_group("output")
    g.add_argument("--output", required=True, help=what)
    g.add_argument("--redo-changed", action="store_true",
                   help="judge again the finished judgments in --output that this run would ask differently (edited "
                        "items, another template, model or decoding); without it such a file is refused")


def run_options(args, **overrides):
    """The typed run options (judge/options.py) of parsed flags: every flag that is an option, --no-swap and
    --no-progress as `swap` and `progress`; `overrides` replace what the flags said."""
    from judge.options import RunOptions

    values = {k: v for k, v in vars(args).items() if k in RunOptions.model_fields}
    if hasattr(args, "no_swap"):
        values["swap"] = not args.no_swap
    if hasattr(args, "no_progress"):
        values["progress"] = not args.no_progress
    values.update(overrides)
    return RunOptions(**values)


def report(outcome) -> int:
    """Print a run's outcome (judge/run.py) as every judging verb ends, and return its exit code."""
    for line in outcome.messages():
        print(line, file=sys.stderr)
    return outcome.exit_code


# -- verbs ------------------------------------------------------------------------------------------------
def run_rubrics(args) -> int:
    from judge.rubric import available_rubrics, load_rubric

    if not args.name:
        for name in available_rubrics():
            r = load_rubric(name)
            print(f"{r.name:<20} {r.task:<9} {r.language:<3} v{r.version:<4} {', '.join(c.id for c in r.criteria)}")
        return 0
    r = load_rubric(args.name)
    print(f"{r.ref}  task={r.task}  language={r.language}  inputs={', '.join(r.inputs)}\n{r.title}\n")
    for c in r.criteria:
        flags = [f for f, on in (("needs reference", c.needs_reference), ("gated", c.gate)) if on]
        print(f"[{c.id}] {c.name} ({c.scale.type}{'; ' + ', '.join(flags) if flags else ''})")
        print(textwrap.indent(textwrap.fill(c.definition, 100), "  "))
        if c.gate:
            print(f"  gate, asked once per dialogue: {c.gate.question}")
        if c.scale.type == "likert":
            for p in c.scale.points:
                print(f"    {p.value} {p.label}: {p.meaning}")
        else:
            for lab in c.scale.labels:
                print(f"    {lab.value!r}{' (abstains)' if lab.abstain else ''}: {lab.meaning}")
        print()
    return 0


def run_render(args) -> int:
    from judge.items import load_items
    from judge.prompting import criterion_messages, gate_messages, segment_messages
    from judge.rubric import load_rubric

    rubric = load_rubric(args.rubric)
    items = load_items(args.input, rubric.inputs)
    item = next((i for i in items if i.id == args.id), None) if args.id else items[0]
    if item is None:
        raise JudgeError(f"{args.input}: no item with id {args.id!r}")
    if rubric.task != "pairwise" and item.is_pair:
        from judge.run import pair_for_one

        raise JudgeError(pair_for_one(args.input, item, rubric))
    out: list[dict[str, Any]] = []
    from judge.options import criteria_ids

    for c in rubric.select(criteria_ids(args.criteria)):
        if c.gate:
            out.append({"criterion": c.id, "kind": "gate", "messages": gate_messages(rubric, c, item)})
        segment = None
        if c.per_segment:
            if not item.segments:
                out.append({"criterion": c.id, "kind": "split", "messages": segment_messages(rubric, item)})
            segment = item.segments[0] if item.segments else "(each segment the split returns)"
        messages = criterion_messages(rubric, c, item, args.template, segment=segment,
                                      segment_number=1 if segment else None)
        out.append({"criterion": c.id, "kind": "judge", "messages": messages})
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=2))
        return 0
    for block in out:
        print(f"===== {block['criterion']} ({block['kind']}) — item {item.id}, system {item.system} =====")
        for m in block["messages"]:
            print(f"--- {m['role']} ---\n{m['content']}\n")
    return 0


def run_score(args) -> int:
    """`judge score` and `judge compare` (args.command)."""
    from judge.run import run

    options = run_options(args)
    if options.dry_run:  # the plan is printed instead of run
        from judge.dry_run import report as plan_report

        return plan_report(options)
    return report(run(options))


run_compare = run_score


def run_qualify(args) -> int:
    import tempfile

    from judge.items import Item
    from judge.judgment import read_judgments
    from judge.qualification import qualification_report
    from judge.rubric import load_rubric
    from judge.run import run

    rubric = load_rubric(args.rubric)
    if rubric.qualification is None:
        raise JudgeError(f"rubric {rubric.name!r} ships no qualification set")
    items = [Item.model_validate(q.model_dump(exclude={"expected"})) for q in rubric.qualification.items]
    criteria = [c for c in rubric.criteria if any(c.id in q.expected for q in rubric.qualification.items)]
    with tempfile.TemporaryDirectory() as scratch:
        options = run_options(args, output=args.output or f"{scratch}/qualification.jsonl")
        outcome = run(options, items=items, criteria=criteria)
        code = report(outcome)
        if outcome.status in ("interrupted", "pending"):
            return code
        records = [judgment for _, judgment in read_judgments(options.output)]
    table, passed = qualification_report(rubric, records)
    print(table)
    return 0 if passed and outcome.status == "complete" else EXIT_FAILED


def package_version() -> str:
    """The installed package's version (its metadata, as pip sees it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llm-judge-rater")
    except PackageNotFoundError:
        return "unknown (run from a source tree that is not installed: pip install -e .)"


class _Version(argparse.Action):
    """`judge --version`: the metadata is read only when asked (every other command builds the parser too)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"judge (llm-judge-rater) {package_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="judge",
        description=__doc__,
        epilog="Run `judge VERB --help` for a verb's flags and an example.",
    )
    parser.add_argument("--version", action=_Version, help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="VERB")

    p = _command(sub, "rubrics", "List the bundled rubrics, or show one's criteria and scales.",
                 "judge rubrics\njudge rubrics call_centre_fr")
    p.add_argument("name", nargs="?", help="rubric name or path to a rubric YAML file")
    p.set_defaults(run=run_rubrics)

    p = _command(sub, "render", "Print the exact messages the judge would receive for one item; no model is called.",
                 "judge render --rubric dialsummeval --input examples/items.jsonl --criteria coherence")
    p.add_argument("--rubric", required=True, help="rubric name (see `judge rubrics`) or YAML path")
    p.add_argument("--input", required=True, help="items, JSONL or CSV")
    p.add_argument("--id", help="render this item id instead of the first item")
    p.add_argument("--criteria", help="comma-separated criterion ids (default: all)")
    p.add_argument("--template", help="a Jinja2 template file to use instead of the rubric's")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(run=run_render)

    p = _command(sub, "score", "Judge every (item, criterion) and append one JSON line per judgment to --output.",
                 """
                 # zero setup: the embedded llama.cpp server with the bundled small model
                 judge score --rubric dialsummeval --input examples/items.jsonl --output judgments.jsonl
                 # any OpenAI-compatible server (vllm serve, llama.cpp server, hosted APIs; key from $OPENAI_API_KEY)
                 judge score --rubric call_centre_fr --input examples/items.jsonl --output out.jsonl \\
                     --backend openai --base-url http://127.0.0.1:8000/v1 \\
                     --model Qwen/Qwen2.5-7B-Instruct --concurrency 64
                 Re-running the same command resumes: finished judgments are skipped, failed ones retried.""")
    g = p.add_argument_group("input")
    g.add_argument("--rubric", required=True, help="rubric name (see `judge rubrics`) or YAML path")
    g.add_argument("--input", required=True, help="items, JSONL or CSV: id, dialogue, candidate, system[, reference]")
    g.add_argument("--criteria", help="comma-separated criterion ids (default: all of the rubric's)")
    g.add_argument("--template", help="a Jinja2 template file to use instead of the rubric's")
    g.add_argument("--mode", choices=["pointwise", "block"], default="pointwise",
                   help="pointwise: one candidate per request (default); block: all candidates of a dialogue in one "
                        "request, in an order shuffled per dialogue by --seed, as annotators saw them")
    add_plan_arguments(add_model_arguments(p))
    _add_output_arguments(p, "judgments JSONL; appended to, and resumed from")
    p.set_defaults(run=run_score)

    p = _command(sub, "compare", "Judge pairs of candidates (1 / 2 / 0 for a tie), in both orders by default.",
                 """
                 judge compare --rubric pairwise_summary --input examples/pairs.jsonl --output verdicts.jsonl
                 Items have candidate_1, candidate_2 (and system_1, system_2). Verdicts are reported in the input's
                 order; when the two orders disagree the verdict is a tie and the line says order_disagreement.
                 Identical candidates tie without a model call.""")
    g = p.add_argument_group("input")
    g.add_argument("--rubric", required=True, help="a pairwise rubric, e.g. pairwise_summary")
    g.add_argument("--input", required=True, help="pairs, JSONL or CSV")
    g.add_argument("--criteria", help="comma-separated criterion ids (default: all)")
    g.add_argument("--template", help="a Jinja2 template file to use instead of the rubric's")
    g.add_argument("--no-swap", action="store_true", help="ask only the input's order (half the cost, no bias check)")
    add_plan_arguments(add_model_arguments(p))
    _add_output_arguments(p, "verdicts JSONL; appended to, and resumed from")
    p.set_defaults(run=run_compare)

    p = _command(sub, "qualify", "Run a rubric's qualification set and say whether the judge passes, per criterion.",
                 """
                 judge qualify --rubric pairwise_summary --backend openai --base-url http://127.0.0.1:8000/v1 --model M
                 Exit code 0 when every criterion reaches the rubric's threshold.""")
    p.add_argument("--rubric", required=True, help="rubric name or YAML path (it must have a qualification block)")
    p.add_argument("--output", help="keep the qualification judgments in this JSONL file")
    p.add_argument("--redo-changed", action="store_true", help="as for `judge score`")
    add_model_arguments(p)
    p.set_defaults(run=run_qualify)

    import importlib

    for module in VERB_MODULES:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (JudgeError, Stopped, KeyboardInterrupt, OSError) as exc:
        if isinstance(exc, BrokenPipeError):  # let Python not complain of the gone reader at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exit_with(args.command, exc)


if __name__ == "__main__":
    sys.exit(main())
